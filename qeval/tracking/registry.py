"""Each variant as a version in the MLflow model registry, its verdict as a tag, so deployment tooling
can pick passed versions. A version points at a small JSON reference (checkpoint path + content hash)
logged in the variant's run, never at the checkpoint's gigabytes.

Idempotent: a (run id, variant) already registered gets no second version; its tags are brought up to
the record's (the record is the source of truth, e.g. after a resumed run evaluated more).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ..record.run import RunRecord

INFO_DIR = "model"
INFO_FILE = "qeval-variant.json"


def variant_tags(record: RunRecord, name: str) -> dict[str, str]:
    v = next(x for x in record.variants if x.name == name)
    return {"qeval.verdict": record.verdicts.get(name, "NOT_EVALUATED"), "qeval.run_id": record.run_id,
            "qeval.variant": name, "qeval.campaign": record.campaign, "method": v.method,
            "checkpoint_hash": v.checkpoint_hash or ""}


def variant_info(record: RunRecord, name: str) -> dict:
    """What the version references: where the checkpoint is and which content it must have."""
    v = next(x for x in record.variants if x.name == name)
    return {"variant": name, "method": v.method, "checkpoint": v.checkpoint, "checkpoint_hash": v.checkpoint_hash,
            "weights_bytes": v.weights_bytes, "recipe": v.recipe, "engine": v.engine,
            "engine_version": v.engine_version, "campaign": record.campaign, "run_id": record.run_id,
            "verdict": record.verdicts.get(name, "NOT_EVALUATED"), "config_hash": record.config_hash}


def register_variants(client, record: RunRecord, children: dict[str, str], model_name: str) -> dict[str, str]:
    """Register every quantized variant that has a child run under `model_name`; returns variant -> version."""
    from mlflow.exceptions import MlflowException

    try:
        client.get_registered_model(model_name)
    except MlflowException:
        client.create_registered_model(model_name, description="quantized variants evaluated by qeval",
                                       tags={"qeval.managed": "true"})
    existing = {mv.tags.get("qeval.variant"): mv for mv in client.search_model_versions(
        f"name = '{model_name}' and tags.`qeval.run_id` = '{record.run_id}'")}
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for v in (v for v in record.variants if v.role == "variant" and v.name in children):
            tags = variant_tags(record, v.name)
            mv = existing.get(v.name)
            run_id = children[v.name]
            # (re)written each time: a resumed run may have evaluated the variant since (checkpoint, verdict)
            info = Path(tmp) / v.name / INFO_FILE
            info.parent.mkdir()
            info.write_text(json.dumps(variant_info(record, v.name), indent=1))
            client.log_artifact(run_id, str(info), INFO_DIR)
            if mv is None:
                mv = client.create_model_version(model_name, f"runs:/{run_id}/{INFO_DIR}", run_id=run_id, tags=tags,
                                                 description=f"{record.campaign} / {v.name} ({v.method})")
            else:
                for k, val in tags.items():
                    if mv.tags.get(k) != val:
                        client.set_model_version_tag(model_name, mv.version, k, val)
            out[v.name] = str(mv.version)
    return out


def passed_filter(model_name: str) -> str:
    """The deployment query: `client.search_model_versions(passed_filter(name))`."""
    return f"name = '{model_name}' and tags.`qeval.verdict` = 'PASS'"
