"""`qeval run --only NAME`: only that variant (and the baseline) is made and served; every other one keeps
what an earlier record shows where the store holds it whole, else is NOT_EVALUATED (never PASS). The
selected variant is an endpoint on a loopback socket here, so nothing but qeval's own code runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qeval.pipeline import campaign
from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import plan
from qeval.config import load_config
from qeval.errors import ConfigError
from qeval.hashing import tree_hash
from qeval.record.run import RunRecord, VariantResult
from qeval.settings import Settings
from qeval.record.store import Record, ResultsStore

from tests.conftest import campaign_file
from tests.loopback import Loopback, js

ROOT = Path(__file__).resolve().parents[2]

def _earlier_run(root: Path, endpoint: str, w4_items: int | None = None):
    """An earlier run: bf16 and w4 evaluated and on the record (w4 with `w4_items` stored, default all)."""
    for name in ("bf16", "w4"):
        (root / "ckpt" / name).mkdir(parents=True)
        (root / "ckpt" / name / "config.json").write_text(json.dumps({"qeval_test": name}))
    campaign_file(root, name="only", model={"path": "ckpt/bf16"}, baseline={"name": "bf16", "method": "bf16"},
                  variants=[{"name": "w4", "method": "checkpoint", "checkpoint": "ckpt/w4"},
                            {"name": "w8", "method": "external", "endpoint": f"{endpoint}/v1", "served_model": "m"}],
                  suites=[{"kind": "custom", "path": ROOT / "suites" / "custom" / "capitals.yaml"}],
                  gates={"rules": [{"match": "*", "margin": 0.5}]}, mlflow={"enabled": False})
    cfg = load_config(root / "c.yaml")
    settings = Settings.from_env()
    [capitals] = plan(cfg, settings, str(root / "c.yaml")).suites
    camp = Campaign(cfg, settings, config_file=str(root / "c.yaml"))
    camp.run_dir.mkdir(parents=True)
    record = RunRecord(run_id="earlier", campaign=cfg.name, config_hash=cfg.config_hash(),
                       config=cfg.model_dump(mode="json"), config_file=str(root / "c.yaml"), command=[],
                       started_at="2026-12-01T09:00:00+00:00", finished_at="2026-12-01T09:30:00+00:00")
    with ResultsStore(camp.run_dir / "results.sqlite") as store:
        for v in cfg.all_variants()[:2]:
            ckpt = v.checkpoint or cfg.model.path
            key = camp.variant_key(v, tree_hash(ckpt))
            items = capitals.items[:w4_items] if v.name == "w4" and w4_items else capitals.items
            store.put(key, capitals.key, v.name, "custom/capitals",
                      [Record(item_id=it.id, scores={"contains": 1.0, "normalized": 1.0}) for it in items])
            if len(items) == len(capitals.items):
                store.mark_complete(key, capitals.key, len(items))
            record.variants.append(VariantResult(name=v.name, method=v.method, key=key, checkpoint=str(ckpt),
                                                 checkpoint_hash=tree_hash(ckpt), dtype=camp.dtype().dtype,
                                                 role="baseline" if v is cfg.baseline else "variant"))
    record.save(camp.run_dir / "run.json")
    return camp.run_dir


def _server():
    return Loopback({"GET /v1/models": js({"data": [{"id": "m"}]}),
                     "POST /v1/chat/completions": js({"choices": [{"message": {"role": "assistant",
                                                                               "content": "Paris"}}]})})


def test_only_serves_the_selected_variant_and_keeps_the_others(tmp_path):
    with _server() as root:
        run_dir = _earlier_run(tmp_path, root)
        cfg = load_config(tmp_path / "c.yaml")
        rec = campaign.run(cfg, only=["w8"], config_file=str(tmp_path / "c.yaml")).record
    status = {v.name: v.status for v in rec.variants}
    assert status == {"bf16": "ok", "w4": "ok", "w8": "ok"}
    w4 = next(v for v in rec.variants if v.name == "w4")
    assert w4.suites and w4.suites[0].n == 53 and w4.startup_seconds is None  # not served again
    assert {c.variant for c in rec.comparisons} == {"w4", "w8"}
    assert rec.verdicts["w4"] == "PASS" and rec.finished_at
    assert (run_dir / "run.json").exists()


def test_an_unselected_variant_the_store_lacks_is_not_evaluated(tmp_path):
    with _server() as root:
        _earlier_run(tmp_path, root, w4_items=20)  # w4 was cut after 20 items
        cfg = load_config(tmp_path / "c.yaml")
        rec = campaign.run(cfg, only=["w8"], config_file=str(tmp_path / "c.yaml")).record
    w4 = next(v for v in rec.variants if v.name == "w4")
    assert w4.status == "skipped" and "--only" in w4.error
    assert rec.verdicts["w4"] == "NOT_EVALUATED" and rec.finished_at is None  # a plain rerun resumes it
    with pytest.raises(ConfigError, match=r"c.yaml: --only w9: not a variant of this campaign; its variants "
                                          r"are \['w4', 'w8'\]"):
        campaign.run(cfg, only=["w9"], config_file=str(tmp_path / "c.yaml"))


def test_a_record_written_before_a_spec_field_existed_still_carries_over(tmp_path):
    with _server() as root:
        run_dir = _earlier_run(tmp_path, root)
        data = json.loads((run_dir / "run.json").read_text())
        for v in data["config"]["variants"]:
            v.pop("quantizer")  # as records before `quantizer` existed
        (run_dir / "run.json").write_text(json.dumps(data))
        cfg = load_config(tmp_path / "c.yaml")
        rec = campaign.run(cfg, only=["w8"], config_file=str(tmp_path / "c.yaml")).record
    assert next(v for v in rec.variants if v.name == "w4").status == "ok"
