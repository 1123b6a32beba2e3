"""A baseline evaluated by one campaign is reused by the next: whole suites go to the machine's shared
store (keyed by checkpoint, engine, dtype and suite content) and a later campaign, whatever its name,
takes them instead of serving the variant again."""

from __future__ import annotations

import json
from pathlib import Path

from qeval.config import load_config
from qeval.hashing import tree_hash
from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import plan
from qeval.pipeline.sink import StoreSink
from qeval.settings import Settings
from qeval.record.store import Record, ResultsStore
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parents[2]

def _campaign(root: Path, name: str, base: str):
    for ckpt in ("bf16", "w4"):
        (root / "ckpt" / ckpt).mkdir(parents=True, exist_ok=True)
        (root / "ckpt" / ckpt / "config.json").write_text(json.dumps({"qeval_test": ckpt}))
    path = campaign_file(root, name=name, file=f"{name}.yaml", model={"path": "ckpt/bf16"},
                         baseline={"name": base, "method": "bf16"},
                         variants=[{"name": "w4", "method": "checkpoint", "checkpoint": "ckpt/w4"}],
                         suites=[{"kind": "custom", "path": ROOT / "suites" / "custom" / "capitals.yaml"}],
                         gates={"rules": [{"match": "*", "margin": 0.5}]}, mlflow={"enabled": False})
    return load_config(path), str(path)


def _recs(items, wrong=()):
    return [Record(item_id=it.id, scores={"contains": float(it.id not in wrong), "normalized": 1.0})
            for it in items]


def test_copy_suite_takes_only_whole_suites_under_the_readers_names(tmp_path):
    with ResultsStore(tmp_path / "a.sqlite") as a, ResultsStore(tmp_path / "b.sqlite") as b:
        a.put("v", "s", "bf16", "custom/x", [Record(item_id="1", scores={"m": 1.0})])
        assert a.copy_suite(b, "v", "s") == 0 and b.count() == 0  # not complete: nothing to reuse
        a.mark_complete("v", "s", 1)
        assert a.copy_suite(b, "v", "s", "baseline", "custom/x") == 1
        assert b.is_complete("v", "s") and b.records("v", "s") == a.records("v", "s")
        assert b.keys_written_since("baseline", 0) == ["v"] and b.keys_written_since("bf16", 0) == []


def test_a_second_campaign_of_another_name_serves_nothing_it_finds_in_the_shared_store(tmp_path):
    shared = tmp_path / "shared.sqlite"
    # the first campaign stored both variants' suites; its sink copied each whole suite to the shared store
    first, first_file = _campaign(tmp_path, "first", "bf16")
    settings = Settings(cache=tmp_path / "cache", records=shared)
    [capitals] = plan(first, settings, first_file).suites
    camp = Campaign(first, settings, config_file=first_file)
    with ResultsStore(camp.run_dir / "results.sqlite") as store, StoreSink(store, shared=shared) as sink:
        for v, wrong in ((first.baseline, ()), (first.variants[0], {capitals.items[0].id})):
            key = camp.variant_key(v, tree_hash(v.checkpoint or first.model.path))
            sink.put(key, capitals.key, v.name, "custom/capitals", _recs(capitals.items, wrong))
            sink.mark_complete(key, capitals.key, len(capitals.items))
    # another name, another name for its baseline: the same content, so nothing is served (this cache has
    # no vLLM: a start would be an error on the record)
    second, second_file = _campaign(tmp_path, "second", "baseline")
    rec = Campaign(second, settings, config_file=second_file).run().record
    assert [(v.name, v.status, v.reused, v.startup_seconds) for v in rec.variants] == [
        ("baseline", "ok", {"custom/capitals": 53}, None), ("w4", "ok", {"custom/capitals": 53}, None)]
    assert rec.verdict == "PASS"
    [c] = [c for c in rec.comparisons if c.metric == "contains"]
    assert (c.n_paired, c.flips_base_only) == (53, 1)
    with ResultsStore(tmp_path / "runs" / "second" / "results.sqlite") as store:
        assert store.keys_written_since("baseline", 0)  # under the second campaign's own names


def test_sharing_off_serves_again(tmp_path):
    shared = tmp_path / "shared.sqlite"
    first, first_file = _campaign(tmp_path, "first", "bf16")
    settings = Settings(cache=tmp_path / "cache", records=shared)
    [capitals] = plan(first, settings, first_file).suites
    key = Campaign(first, settings).variant_key(first.baseline, tree_hash(first.model.path))
    with ResultsStore(shared) as s:
        s.put(key, capitals.key, "bf16", "custom/capitals", _recs(capitals.items))
        s.mark_complete(key, capitals.key, len(capitals.items))
    off = Settings(cache=tmp_path / "cache", records=shared, share_records=False)
    rec = Campaign(first, off, config_file=first_file).run().record
    base = rec.variants[0]
    assert base.status == "error" and base.reused == {} and "environment" in base.error  # it tried to serve
    assert Settings.from_env({"HOME": str(tmp_path), "QEVAL_RECORDS": "off"}).share_records is False
    assert Settings.from_env({"HOME": str(tmp_path)}).records == (tmp_path / ".cache" / "qeval" / "records.sqlite")
