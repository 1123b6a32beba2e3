"""The publish stage: the files beside the record (each variant's per-item table, the report), then the record into
MLflow, which reads those files and the record only (a tracker fault keeps it local)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import PlainReporter, Reporter

if TYPE_CHECKING:
    from ..config import CampaignConfig
    from ..record.run import RunRecord


def publish(record: "RunRecord", run_dir: Path, record_path: Path, cfg: "CampaignConfig",
            reporter: Reporter | None = None) -> tuple["RunRecord", dict[str, Path]]:
    """Write the report, then log the record to MLflow. A tracking failure keeps the record local. Returns the
    record as saved (with where it was tracked, or why not) and the report's files by name ("report" the
    summary)."""
    from ..verdict.decision import for_record as decisions
    from ..verdict.recommend import for_record
    from ..report import write_all
    from ..tracking.mlflow import log_record

    log = (reporter or PlainReporter()).log
    export_items(record, run_dir)
    paths = write_all(record, run_dir)
    log(for_record(record).text())  # the CI log's line for the release manager, as in summary.md
    for d in decisions(record):  # and each KV-cache or serving variant's decision
        log(f"decision: {d.text()}")
    if cfg.mlflow.enabled:
        uri = cfg.mlflow.uri(cfg.output_dir, os.environ)
        use_server = cfg.mlflow.server and not cfg.mlflow.tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI")
        register_as = cfg.mlflow.registered_name(cfg.name)
        try:
            if use_server:
                from ..tracking.server import MlflowServer

                with MlflowServer(cfg.output_dir) as url:
                    log(f"MLflow server up at {url} (store {cfg.output_dir / 'mlflow.db'})")
                    tracking = log_record(record, run_dir, url, cfg.mlflow.experiment, register_as)
                # the server is gone; the same store stays readable directly
                tracking = {**tracking, "server_url": tracking["tracking_uri"], "tracking_uri": uri}
            else:
                tracking = log_record(record, run_dir, uri, cfg.mlflow.experiment, register_as)
        except Exception as e:  # any tracker fault: the record is safe on disk; `qeval sync` retries
            tracking = {"tracking_uri": uri, "error": f"{type(e).__name__}: {e}"[:500]}
            log(f"MLflow logging failed ({type(e).__name__}: {e}); the run record is kept in "
                f"{record_path}; run `qeval sync {run_dir}` later")
        record = record.model_copy(update={"tracking": tracking})
        record.save(record_path)
    return record, paths


def export_items(record: "RunRecord", run_dir: Path) -> list[Path]:
    """Each evaluated variant's per-item records, from the campaign's store, as a table beside the record
    (tracking/mlflow.py items_file): one row per item and sample, its scores as `score.<metric>` columns."""
    import pandas as pd

    from ..record.store import ResultsStore
    from ..tracking.mlflow import items_file

    written = []
    with ResultsStore(run_dir / "results.sqlite") as store:
        for v in record.variants:
            if v.status != "ok":
                continue
            rows = [{"variant": v.name, "suite": s.suite, "item_id": r.item_id, "sample": r.sample, "group": r.group,
                     "prompt_hash": r.prompt_hash, "doc_hash": r.doc_hash, "response": r.response,
                     **{f"score.{k}": val for k, val in r.scores.items()}}
                    for s in v.suites for r in store.records(v.key, s.key)]
            path = items_file(run_dir, v.name)
            tmp = path.with_name(path.name + ".tmp")
            pd.DataFrame(rows).to_parquet(tmp)
            tmp.replace(path)  # whole or not at all
            written.append(path)
    return written
