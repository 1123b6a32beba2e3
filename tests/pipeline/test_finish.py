"""`qeval finish` on a run cut while a variant was being evaluated: the suites that variant finished are
compared, the rest is named as missing, and its verdict is NOT_EVALUATED, never PASS. The per-item scores
are written here (serving is what a cut run did not finish); the comparison, gates and reports are qeval's."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from qeval.pipeline import campaign
from qeval.pipeline.campaign import Campaign
from qeval.pipeline.judge import judge, summarize
from qeval.pipeline.plan import plan
from qeval.config import load_config
from qeval.hashing import tree_hash
from qeval.record.run import RunRecord, VariantResult
from qeval.settings import Settings
from qeval.record.store import Record, ResultsStore
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parents[2]

def _cut_run(root: Path, w4_on_record: bool, written_at: float | None = None, relative: bool = False):
    """bf16 finished; w4 finished capitals and 5 arithmetic items when the run was cut; w8 never started.
    `relative`: the campaign file names its checkpoints, suites and run folder relative to itself."""
    for name in ("bf16", "w4", "w8"):
        (root / "ckpt" / name).mkdir(parents=True)
        (root / "ckpt" / name / "config.json").write_text(json.dumps({"qeval_test": name}))
    if relative:
        shutil.copytree(ROOT / "suites" / "custom", root / "suites")
    at, suites = (".", "suites") if relative else (root, ROOT / "suites" / "custom")
    config = campaign_file(
        root, name="cut", file="cut.yaml", model={"path": f"{at}/ckpt/bf16"}, output_dir=f"{at}/runs",
        baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "w4", "method": "checkpoint", "checkpoint": f"{at}/ckpt/w4"},
                  {"name": "w8", "method": "checkpoint", "checkpoint": f"{at}/ckpt/w8"}],
        suites=[{"kind": "custom", "path": f"{suites}/capitals.yaml"},
                {"kind": "custom", "path": f"{suites}/arithmetic.yaml"}],
        gates={"rules": [{"match": "*", "margin": 0.15}]}, probe={"enabled": False}, mlflow={"enabled": False})
    cfg = load_config(config)
    settings = Settings.from_env()
    p = plan(cfg, settings, str(config))
    camp = Campaign(cfg, settings, config_file=str(config))
    camp.run_dir.mkdir(parents=True)
    record = RunRecord(run_id="cut-0001", campaign=cfg.name, config_hash=cfg.config_hash(),
                       config=cfg.model_dump(mode="json"), config_file=str(config), command=["qeval", "run"],
                       started_at="2026-11-30T10:00:00+00:00")
    capitals, arithmetic = p.suites
    keys = {}
    with ResultsStore(camp.run_dir / "results.sqlite") as store:
        for v, suites in ((cfg.baseline, [(capitals, None), (arithmetic, None)]),
                          (cfg.variants[0], [(capitals, None), (arithmetic, 5)])):
            ckpt = v.checkpoint or cfg.model.path
            keys[v.name] = key = camp.variant_key(v, tree_hash(ckpt))
            for suite, upto in suites:
                items = suite.items[:upto] if upto else suite.items
                # w4 gets the first 10 capitals wrong that the baseline gets right
                recs = [Record(item_id=it.id, scores={m: 0.0 if v.name == "w4" and k < 10 else 1.0
                                                      for m in ("exact", "contains", "normalized", "numeric")})
                        for k, it in enumerate(items)]
                store.put(key, suite.key, v.name, f"custom/{suite.name}", recs)
                if upto is None:
                    store.mark_complete(key, suite.key, len(suite.items))
            res = VariantResult(name=v.name, method=v.method, role="baseline" if v is cfg.baseline else "variant",
                                key=key, checkpoint=str(ckpt), checkpoint_hash=tree_hash(ckpt))
            if v.name == "w4":
                if not w4_on_record:
                    continue
                res.status, res.error = "partial", "cut while being evaluated; run the same command again"
            else:
                res.suites = summarize(store, key, p)
            record.variants.append(res)
        if written_at is not None:  # the store's rows for w4 predate this run
            store._db.execute("UPDATE records SET created_at=? WHERE variant='w4'", (written_at,))
    record.save(camp.run_dir / "run.json")
    return cfg, str(config), camp.run_dir, keys


@pytest.mark.parametrize("w4_on_record", [True, False], ids=["recorded-partial", "found-in-store"])
def test_finish_compares_what_a_cut_variant_finished(tmp_path, w4_on_record):
    cfg, config, run_dir, keys = _cut_run(tmp_path, w4_on_record)
    rec = campaign.finish(cfg, config_file=config).record
    w4 = next(v for v in rec.variants if v.name == "w4")
    assert (w4.status, w4.key) == ("partial", keys["w4"])
    assert [s.suite for s in w4.suites] == ["custom/capitals"]  # arithmetic was cut after 5 items
    assert "missing: custom/arithmetic" in w4.error and "NOT_EVALUATED" in w4.error
    compared = {(c.variant, c.suite) for c in rec.comparisons}
    assert compared == {("w4", "custom/capitals")}
    cap = next(c for c in rec.comparisons if c.variant == "w4" and c.primary)
    assert (cap.n_paired, cap.delta) == (53, pytest.approx(-10 / 53))
    assert rec.verdicts == {"w4": "NOT_EVALUATED", "w8": "NOT_EVALUATED"}  # never PASS
    assert rec.verdict == "NOT_EVALUATED" and rec.finished_at is None  # `qeval run` still resumes it
    assert {v.name: v.status for v in rec.variants} == {"bf16": "ok", "w4": "partial", "w8": "skipped"}
    report = (run_dir / "report.md").read_text()
    assert "cut while being evaluated" in report


def test_finish_ignores_store_rows_older_than_the_run(tmp_path):
    # a key this name was written to by an earlier run in the same folder is not this run's variant
    cfg, config, _, _ = _cut_run(tmp_path, w4_on_record=False, written_at=1.0)
    rec = campaign.finish(cfg, config_file=config).record
    assert {v.name: v.status for v in rec.variants} == {"bf16": "ok", "w4": "skipped", "w8": "skipped"}
    assert not rec.comparisons


def test_a_run_made_in_one_folder_is_finished_from_a_copy_in_another(tmp_path):
    """CI checks out to a new folder each time: paths enter the config hash as the file wrote them."""
    cfg, config, _, keys = _cut_run(tmp_path / "checkout-a", w4_on_record=True, relative=True)
    shutil.copytree(tmp_path / "checkout-a", tmp_path / "elsewhere" / "checkout-b")
    copy = load_config(tmp_path / "elsewhere" / "checkout-b" / "cut.yaml")
    assert copy.config_hash() == cfg.config_hash()
    assert copy.model.path != cfg.model.path  # each resolves to its own folder
    rec = campaign.finish(copy, config_file=str(tmp_path / "elsewhere" / "checkout-b" / "cut.yaml")).record
    w4 = next(v for v in rec.variants if v.name == "w4")
    assert (w4.status, w4.key) == ("partial", keys["w4"])  # same content, same keys
    cap = next(c for c in rec.comparisons if c.variant == "w4" and c.primary)
    assert (cap.n_paired, cap.delta) == (53, pytest.approx(-10 / 53))
    changed = (tmp_path / "checkout-a" / "cut.yaml").read_text().replace("margin: 0.15", "margin: 0.2")
    (tmp_path / "checkout-a" / "other.yaml").write_text(changed)
    assert load_config(tmp_path / "checkout-a" / "other.yaml").config_hash() != cfg.config_hash()


def test_judging_reads_the_record_and_one_place_writes_the_judgement_in(tmp_path):
    cfg, config, run_dir, _ = _cut_run(tmp_path, w4_on_record=True)
    rec = campaign.finish(cfg, config_file=config).record
    before = rec.model_dump_json()
    keys = {v.name: v.key for v in rec.variants if v.status in ("ok", "partial") and v.key}
    with ResultsStore(run_dir / "results.sqlite") as store:
        j = judge(cfg, rec, store, keys, plan(cfg, Settings.from_env(), config))
    assert rec.model_dump_json() == before  # judging changed nothing
    with pytest.raises(dataclasses.FrozenInstanceError):
        j.verdict = "PASS"  # type: ignore[misc]
    assert j.verdicts == {"w4": "NOT_EVALUATED", "w8": "NOT_EVALUATED"} and ("w4", "custom/capitals") in j.flipped
    again = campaign.judged(rec, j)
    assert again is not rec and rec.model_dump_json() == before  # the record judged is left as it was
    assert again.model_dump_json() == before  # judged again from the same store: the same record
