"""Sequential gates in the pipeline, on the fake engine: every variant evaluates a suite in one seeded
order, a batch per look, and stops once its gates are decided; the driver reaches the same verdicts from
the store; stop_variant_on_fail skips what is left of a failed variant (NOT_RUN, never PASS)."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from pathlib import Path

import numpy as np
import pytest
import yaml

from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.pipeline import campaign
from qeval.progress import PlainReporter
from qeval.settings import Settings
from qeval.stats.sequential import gsd_gate
from qeval.verdict.sequential import evaluation_order, prefix_length, suite_order
from tests.conftest import campaign_file, fake_checkpoint
from tests.pipeline.test_pipeline_fake import _suites

N = 400  # items per suite: a decided FAIL at the first look (100) saves three quarters of them


def _campaign(root: Path, gates: str, name: str = "s") -> Path:
    """`gates` as a campaign file writes it (YAML text), as the tests that share this campaign give it."""
    answers = _suites(root, N)
    fake_checkpoint(root, "base", FakeEngineSpec(answers=answers))
    bad = fake_checkpoint(root, "bad", FakeEngineSpec(model="bad", answers=answers, wrong_fraction=0.4))
    same = fake_checkpoint(root, "same", FakeEngineSpec(model="same", answers=answers))
    return campaign_file(
        root, name=name, file=f"{name}.yaml",
        variants=[{"name": "bad", "method": "checkpoint", "checkpoint": bad},
                  {"name": "same", "method": "checkpoint", "checkpoint": same}],
        engine={"kind": "fake", "startup_timeout_s": 30},
        suites=[{"kind": "custom", "path": "facts.yaml"}, {"kind": "custom", "path": "sums.yaml"}],
        probe={"enabled": False}, gates=yaml.safe_load(gates), mlflow={"enabled": False})


SEQ = "{rules: [{match: '*', margin: 0.05}], sequential: {method: gsd, look_every: 100, min_items: 100}}"


def _run(root: Path, gates: str, name: str = "s"):
    config = _campaign(root, gates, name)
    # what a `qeval run` of it reads (QEVAL_EMULATE_CPU included): the Ray test compares its keys with this run's
    settings = Settings.from_env({**os.environ, "QEVAL_CACHE": str(root / "cache"), "QEVAL_RECORDS": "off"})
    return campaign.run(load_config(config), settings, reporter=PlainReporter(lambda s: None),
                        config_file=str(config))


def _stored(run_dir: Path, variant: str, suite: str) -> list[str]:
    db = sqlite3.connect(run_dir / "results.sqlite")
    return [r[0] for r in db.execute("SELECT item_id FROM records WHERE variant=? AND suite=?", (variant, suite))]


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    root = tmp_path_factory.mktemp("seq")
    return root, _run(root, SEQ)


def test_a_clear_failure_stops_at_the_first_look_in_the_shared_order(sequential):
    root, res = sequential
    rec = res.record
    assert rec.verdicts == {"bad": "FAIL", "same": "PASS"}
    bad = {g.suite: g for g in rec.gates if g.variant == "bad"}
    for suite in ("custom/facts", "custom/sums"):
        g = bad[suite]
        assert (g.verdict, g.items_used, g.items_planned) == ("FAIL", 100, N), g
        assert g.sequential.startswith("gsd")
        ids = _stored(res.run_dir, "bad", suite)
        assert len(ids) == 100  # evaluated no further than its deciding look
        # exactly the first 100 of the seeded order the baseline's items define
        base_ids = _stored(res.run_dir, "base", suite)
        assert len(base_ids) == N
        order = evaluation_order(sorted(base_ids), [None] * N, 0, next(s.key for s in rec.variants[1].suites
                                                                         if s.suite == suite))
        assert set(ids) == set(order[:100])
    summary = {s.suite: s for s in rec.variants[1].suites}
    assert summary["custom/facts"].n == 100 and summary["custom/facts"].planned == N


def test_the_driver_reads_the_same_decision_the_run_stopped_on(sequential):
    """The gate's result is gsd_gate on the stored differences in the shared order (an independent call)."""
    root, res = sequential
    db = sqlite3.connect(res.run_dir / "results.sqlite")
    key = next(s.key for s in res.record.variants[0].suites if s.suite == "custom/facts")
    score = {(v, i): json.loads(s)["contains"] for v, i, s in
             db.execute("SELECT variant, item_id, scores FROM records WHERE suite_key=?", (key,))}
    base = sorted(i for v, i in score if v == "base")
    order, _ = suite_order(base, [None] * N, 0, key)
    have = {i for v, i in score if v == "same"}
    t = prefix_length(order, have)
    d = np.array([score[("same", i)] - score[("base", i)] for i in order[:t]])
    expect = gsd_gate(d, N, 0.05, 0.05, look_every=100, min_items=100, binary=True, planning_sd=0.1 ** 0.5,
                      futility=0.05, mde=None)
    g = next(g for g in res.record.gates if g.variant == "same" and g.suite == "custom/facts")
    assert g.verdict == expect.verdict == "PASS"
    assert g.items_used == expect.items_used < N  # identical answers: decided before the last look


def test_fixed_n_gates_evaluate_every_item(tmp_path):
    res = _run(tmp_path, "{rules: [{match: '*', margin: 0.05}]}")
    assert res.record.verdicts == {"bad": "FAIL", "same": "PASS"}
    assert len(_stored(res.run_dir, "bad", "custom/facts")) == N
    assert all(g.sequential is None and g.items_used is None for g in res.record.gates)


def test_stop_variant_on_fail_skips_the_rest_as_not_run(tmp_path):
    gates = ("{rules: [{match: '*', margin: 0.05}], stop_variant_on_fail: true, "
             "sequential: {method: gsd, look_every: 100, min_items: 100}}")
    res = _run(tmp_path, gates)
    rec = res.record
    assert rec.verdicts == {"bad": "FAIL", "same": "PASS"}
    bad = {g.suite: g for g in rec.gates if g.variant == "bad"}
    assert bad["custom/facts"].verdict == "FAIL"
    assert bad["custom/sums"].verdict == "NOT_RUN" and "custom/facts" in bad["custom/sums"].reason
    assert _stored(res.run_dir, "bad", "custom/sums") == []
    assert rec.variants[1].not_run.keys() == {"custom/sums"}
    # the variant that passes runs everything
    assert {g.verdict for g in rec.gates if g.variant == "same"} == {"PASS"}


def test_a_rerun_of_a_stopped_campaign_serves_nothing(tmp_path):
    gates = ("{rules: [{match: '*', margin: 0.05}], stop_variant_on_fail: true, "
             "sequential: {method: gsd, look_every: 100, min_items: 100}}")
    first = _run(tmp_path, gates)
    again = _run(tmp_path, gates)
    assert [g.model_dump() for g in again.record.gates] == [g.model_dump() for g in first.record.gates]
    assert [v.startup_seconds for v in again.record.variants] == [v.startup_seconds for v in first.record.variants]


def test_evaluation_order_is_seeded_and_keeps_groups_together():
    ids = [f"i{k}" for k in range(12)]
    groups = [f"g{k // 3}" for k in range(12)]
    a = evaluation_order(ids, groups, 0, "suite")
    assert a == evaluation_order(list(reversed(ids)), list(reversed(groups)), 0, "suite")  # input order is irrelevant
    assert a != evaluation_order(ids, groups, 1, "suite") or a != evaluation_order(ids, groups, 0, "other")
    seen = [groups[ids.index(i)] for i in a]
    assert all(seen[k] == seen[k + 1] for k in range(len(seen) - 1) if k % 3 != 2)  # whole groups in a row
    assert sorted(a) == sorted(ids)
    assert prefix_length(a, set(a[:5]) | {a[7]}) == 5


def test_betting_on_a_continuous_metric_is_refused_before_anything_starts(tmp_path):
    from qeval.errors import ConfigError
    from qeval.pipeline.plan import plan

    config = _campaign(tmp_path, "{rules: [{match: '*', margin: 0.05}, {match: 'logprobs/*/kl', margin: 0.1, "
                                 "sequential: {method: betting}}]}")
    cfg = yaml.safe_load(config.read_text())
    cfg["suites"].insert(0, {"kind": "logprobs", "name": "p", "corpus": "pydoc", "chunks": 4})
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    with pytest.raises(ConfigError, match=r"logprobs/p/kl: the betting sequence cannot gate it \(its scores are not 0/1\)"):
        plan(load_config(config), Settings(cache=tmp_path / "cache", share_records=False), str(config))


def test_an_lmeval_task_is_cut_over_the_docs_its_data_has():
    """A task with fewer docs than its suite's limit (oe_copa: 100 of 200) is cut over those;
    its key names the looks, not the count, so `qeval finish` (no pre-flight) finds the same key."""
    from qeval.suites.lmeval_tasks import LmEvalTask

    t = LmEvalTask(name="t", key="lm_eval:t:abc", settings={"limit": 200}).in_batches(((50, 50),))
    assert t.key.startswith("lm_eval:t:abc:b") and t.unbatched_key == "lm_eval:t:abc"
    assert t.batches == (50, 100, 150, 200)
    counted = dataclasses.replace(t, n_docs=70)
    assert counted.key == t.key and counted.planned_docs == 70 and counted.batches == (50, 70)
    assert LmEvalTask(name="t", key="k", settings={"limit": 200}).batches == ()


def test_a_pending_reference_is_waited_for_once_after_the_engine_is_up(tmp_path):
    """The ray executor's way: a variant is made and served while the baseline still runs, and waits for the
    baseline's records only at its first suite; its run then stops where a run given them at once stops."""
    from qeval.pipeline.campaign import Campaign
    from qeval.pipeline.sink import Reference
    from qeval.pipeline.plan import plan
    from qeval.pipeline.sink import StoreSink
    from qeval.pipeline.variant import run_variant
    from qeval.record.store import ResultsStore

    config = _campaign(tmp_path, SEQ)
    cfg, settings = load_config(config), Settings(cache=tmp_path / "cache", share_records=False)
    base, bad = Campaign(cfg, settings, config_file=str(config)).plans(plan(cfg, settings, str(config)))[:2]
    lines: list[str] = []
    log = PlainReporter(lines.append)
    with ResultsStore(tmp_path / "r.sqlite") as store, StoreSink(store) as sink:
        b = run_variant(base, tmp_path / "ws", sink, log)
        calls: list[int] = []

        def pending() -> Reference:
            calls.append(len(lines))
            return Reference.read(sink, b.key, base)

        lines.clear()
        out = run_variant(bad, tmp_path / "ws", sink, log, reference=pending)
        assert out.status == "ok" and len(calls) == 1
        assert any("engine up" in ln for ln in lines[:calls[0]]), lines  # served before it waited
        # the log says what the deciding look showed, as the reports do
        assert any("custom/facts: settled (contains FAIL (worse than the margin) at 100 of 400)" in ln
                   for ln in lines), lines
        assert sorted(len(_by_suite) for _by_suite in [
            [r for r in store.records(out.key, sk.key)] for sk in bad.suites.parts()]) == [100, 100]
