"""The publish stage: the report from the record, then the record into MLflow (a tracker fault keeps it local)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..progress import PlainReporter, Reporter

if TYPE_CHECKING:
    from ..config import CampaignConfig
    from ..record import RunRecord


def publish(record: "RunRecord", run_dir: Path, record_path: Path, cfg: "CampaignConfig",
            reporter: Reporter | None = None) -> dict[str, Path]:
    """Write the report, then log the record to MLflow. A tracking failure keeps the record local. Returns the
    report's files by name ("report" the summary)."""
    from ..verdict.recommend import for_record
    from ..report import write_all
    from ..tracking.mlflow import log_record

    log = (reporter or PlainReporter()).log
    paths = write_all(record, run_dir)
    log(for_record(record).text())  # the CI log's line for the release manager, as in summary.md
    if cfg.mlflow.enabled:
        uri = cfg.mlflow.uri(cfg.output_dir, os.environ)
        use_server = cfg.mlflow.server and not cfg.mlflow.tracking_uri and not os.environ.get("MLFLOW_TRACKING_URI")
        register_as = cfg.mlflow.registered_name(cfg.name)
        try:
            if use_server:
                from ..tracking.server import MlflowServer

                with MlflowServer(cfg.output_dir) as url:
                    log(f"MLflow server up at {url} (store {cfg.output_dir / 'mlflow.db'})")
                    record.tracking = log_record(record, run_dir, url, cfg.mlflow.experiment, register_as)
                # the server is gone; the same store stays readable directly
                record.tracking["server_url"] = record.tracking["tracking_uri"]
                record.tracking["tracking_uri"] = uri
            else:
                record.tracking = log_record(record, run_dir, uri, cfg.mlflow.experiment, register_as)
        except Exception as e:  # any tracker fault: the record is safe on disk; `qeval sync` retries
            record.tracking = {"tracking_uri": uri, "error": f"{type(e).__name__}: {e}"[:500]}
            log(f"MLflow logging failed ({type(e).__name__}: {e}); the run record is kept in "
                f"{record_path}; run `qeval sync {run_dir}` later")
        record.save(record_path)
    return paths
