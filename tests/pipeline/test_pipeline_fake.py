"""The pipeline's orchestration on the fake engine, in seconds: a `qeval run` SIGKILLed at each stage and
resumed gives the records and verdicts of an uninterrupted run; the time budget; the record in the
campaign's order; plans and outcomes that travel (pickle); a second campaign reusing the first's suites."""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec, write_checkpoint
from qeval.pipeline import campaign
from qeval.pipeline.campaign import Campaign
from qeval.executors.local import LocalExecutor
from qeval.executors.outcome import VariantOutcome
from qeval.pipeline.plan import plan
from qeval.pipeline.sink import StoreSink
from qeval.pipeline.worker import WORK
from qeval.progress import PlainReporter
from qeval.settings import Settings
from qeval.record.store import ResultsStore
from tests.conftest import campaign_file, fake_checkpoint, kill_tree

N = 30  # items per suite: enough for a kill to land mid-suite, few enough for seconds
QEVAL = [sys.executable, "-m", "qeval.cli"]
DELAY = 0.002  # between streamed tokens: a kill lands inside a stage, not after it


def _suites(root: Path, n: int = N) -> list[Path]:
    """Two small custom suites of n items: "facts" (contains) and "sums" (numeric)."""
    for name, scorer, make in (("facts", "contains", lambda i: (f"Name fact {i}.", f"fact-{i}")),
                               ("sums", "numeric", lambda i: (f"What is {i} + {i}?", str(2 * i)))):
        items = [{"id": f"{name}{i}", "prompt": p, "reference": r} for i, (p, r) in enumerate(map(make, range(n)))]
        (root / f"{name}.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
        (root / f"{name}.yaml").write_text(f"name: {name}\nitems: {name}.jsonl\nscorers: [{{kind: {scorer}}}]\n")
    # relative to the checkpoint folder: the same checkpoint content (and key) in every test's folder
    return [Path("../../facts.jsonl"), Path("../../sums.jsonl")]


def _campaign(root: Path, name: str = "p", base: str = "base", token_delay_s: float = 0.0) -> Path:
    """A fake baseline, one variant that answers half of the items wrong and one that answers right, two
    custom suites (one item at a time, so a kill lands between records), the latency probe."""
    ANSWERS = _suites(root)
    fake_checkpoint(root, "base", FakeEngineSpec(answers=ANSWERS, token_delay_s=token_delay_s))
    wrong = [f"facts{i}" for i in range(0, N, 2)] + [f"sums{i}" for i in range(1, N, 2)]  # half of each
    w3 = fake_checkpoint(root, "w3", FakeEngineSpec(answers=ANSWERS, wrong=wrong, token_delay_s=token_delay_s))
    # another model (its own checkpoint hash, so its own key) that answers every item as the baseline does
    same = fake_checkpoint(root, "same", FakeEngineSpec(model="same", answers=ANSWERS, token_delay_s=token_delay_s))
    # the Ray tests and benchmarks/ray_vs_local.py add their `executor:` line after `mlflow: {enabled: false}`
    return campaign_file(
        root, name=name, file=f"{name}.yaml", baseline={"name": base, "method": "bf16"},
        variants=[{"name": "w3", "method": "checkpoint", "checkpoint": w3},
                  {"name": "same", "method": "checkpoint", "checkpoint": same}],
        engine={"kind": "fake", "startup_timeout_s": 30},
        suites=[{"kind": "custom", "path": "facts.yaml", "concurrency": 1},
                {"kind": "custom", "path": "sums.yaml", "concurrency": 1}],
        probe={"enabled": True, "concurrency": [1, 2], "requests_per_step": 4, "warmup_requests": 1,
               "prompt_tokens": 8, "output_tokens": 4},
        gates={"rules": [{"match": "*", "margin": 0.4}]}, mlflow={"enabled": False})


def _records(run_dir: Path) -> list[tuple]:
    db = sqlite3.connect(run_dir / "results.sqlite")
    return sorted(db.execute("SELECT variant_key, suite_key, item_id, sample, variant, response, scores FROM records"))


def _verdicts(run_dir: Path) -> tuple[dict, list]:
    rec = json.loads((run_dir / "run.json").read_text())
    return rec["verdicts"], sorted((g["variant"], g["suite"], g["metric"], g["verdict"]) for g in rec["gates"])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("whole")
    config = _campaign(root, token_delay_s=DELAY)
    # the settings the killed runs' `qeval` reads (QEVAL_EMULATE_CPU included), so their keys are the same
    settings = Settings.from_env({**os.environ, "QEVAL_CACHE": str(root / "cache"), "QEVAL_RECORDS": "off"})
    campaign.run(load_config(config), settings, reporter=PlainReporter(lambda s: None), config_file=str(config))
    return root / "runs" / "p"


def _rows(run_dir: Path, variant: str) -> int:
    try:
        db = sqlite3.connect(f"file:{run_dir / 'results.sqlite'}?mode=ro", uri=True, timeout=5)
        return db.execute("SELECT COUNT(*) FROM records WHERE variant=?", (variant,)).fetchone()[0]
    except sqlite3.Error:
        return 0


# where to cut: each a condition on the run folder, met during the stage it names
STAGES = {
    "engine start": lambda d: (d / "logs" / "engine-w3.log").exists(),
    "mid-suite": lambda d: _rows(d, "w3") >= N // 2,
    "probe": lambda d: _rows(d, "w3") >= 2 * N,  # both suites stored: the probe is next
    "between variants": lambda d: _rows(d, "same") >= 1,
}


def test_killed_at_each_stage_then_resumed_equals_uninterrupted(uninterrupted, spawn, tmp_path):
    """One run folder, SIGKILLed at each stage in turn, each rerun resuming what the last one left; the
    last rerun finishes, with the records and verdicts of a run never cut."""
    config = _campaign(tmp_path, token_delay_s=DELAY)
    run_dir = tmp_path / "runs" / "p"
    env = {**os.environ, "QEVAL_CACHE": str(tmp_path / "cache"), "QEVAL_RECORDS": "off"}
    for n, (stage, reached) in enumerate(STAGES.items()):
        err = tmp_path / f"{n}.err"
        proc = spawn([*QEVAL, "run", str(config), "--no-mlflow"], env=env, stdout=subprocess.DEVNULL,
                     stderr=err.open("w"))
        deadline = time.monotonic() + 120  # an outer bound, not the expected time
        while not reached(run_dir):
            assert proc.poll() is None, f"the run ended before {stage}: {err.read_text()[-500:]}"
            assert time.monotonic() < deadline, f"{stage} never came"
            time.sleep(0.02)
        kill_tree(proc, proc.test_token)  # SIGKILL: the CLI's group and the servers it started
        rec = json.loads((run_dir / "run.json").read_text())
        assert not rec["finished_at"], stage
    again = spawn([*QEVAL, "run", str(config), "--no-mlflow"], env=env, stdout=subprocess.DEVNULL,
                  stderr=(tmp_path / "last.err").open("w"))
    assert again.wait(timeout=120) == 1, (tmp_path / "last.err").read_text()[-2000:]  # a gate failed: w3
    assert _records(run_dir) == _records(uninterrupted)
    assert _verdicts(run_dir) == _verdicts(uninterrupted)
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["finished_at"] and [v["status"] for v in rec["variants"]] == ["ok", "ok", "ok"]
    assert rec["verdicts"] == {"w3": "FAIL", "same": "PASS"}


def test_a_spent_time_budget_leaves_variants_not_evaluated_and_a_rerun_resumes(tmp_path):
    config = _campaign(tmp_path)
    settings = Settings(cache=tmp_path / "cache", share_records=False)
    quiet = PlainReporter(lambda s: None)
    cut = campaign.run(load_config(config), settings, reporter=quiet, config_file=str(config), max_seconds=0)
    assert [(v.name, v.status) for v in cut.record.variants] == [("base", "ok"), ("w3", "skipped"),
                                                                 ("same", "skipped")]
    assert cut.record.verdicts == {"w3": "NOT_EVALUATED", "same": "NOT_EVALUATED"} and not cut.record.finished_at
    assert "time budget" in cut.record.variants[1].error
    whole = campaign.run(load_config(config), settings, reporter=quiet, config_file=str(config))
    assert whole.record.run_id == cut.record.run_id and whole.record.finished_at
    assert whole.record.verdicts == {"w3": "FAIL", "same": "PASS"}
    assert whole.record.variants[0].startup_seconds == cut.record.variants[0].startup_seconds  # not served again


def test_outcomes_come_in_plan_order_and_plans_and_outcomes_travel(tmp_path):
    config = _campaign(tmp_path)
    cfg, settings = load_config(config), Settings(cache=tmp_path / "cache", share_records=False)
    camp = Campaign(cfg, settings, config_file=str(config))
    plans = camp.plans(plan(cfg, settings, str(config)))
    plans = pickle.loads(pickle.dumps(plans))  # what another process or machine would receive
    assert [(p.name, p.role) for p in plans] == [("base", "baseline"), ("w3", "variant"), ("same", "variant")]
    assert plans[1].suites.suites[0].scorers[0]("it is fact-3", "fact-3") == 1.0  # scorers rebuilt where it lands
    begun = []
    with ResultsStore(tmp_path / "s.sqlite") as store, StoreSink(store, begun.append) as sink:
        outs = list(LocalExecutor().run(plans, WORK, tmp_path / "ws", sink, PlainReporter(lambda s: None)))
        assert [o.name for o in outs] == [b.name for b in begun] == ["base", "w3", "same"]
        assert all(b.status == "partial" for b in begun) and all(o.status == "ok" for o in outs)
        out = pickle.loads(pickle.dumps(outs[1]))
        assert isinstance(out, VariantOutcome) and out == outs[1]
        # what it wrote is under its workspace, named relative to it; its records went through the sink only
        assert not Path(out.probe_path).is_absolute() and (tmp_path / "ws" / out.probe_path).is_file()
        assert store.is_complete(out.key, plans[1].suites.suites[0].key)
    assert not (tmp_path / "ws" / "run.json").exists()  # the driver writes the record, never a variant


def test_a_second_campaign_reuses_the_first_ones_suites_and_serves_only_for_the_probe(tmp_path):
    settings = Settings(cache=tmp_path / "cache", records=tmp_path / "shared.sqlite")
    quiet = PlainReporter(lambda s: None)
    first = _campaign(tmp_path, name="first")
    a = campaign.run(load_config(first), settings, reporter=quiet, config_file=str(first)).record
    lines: list[str] = []
    second = _campaign(tmp_path, name="second", base="bf16")  # another name, another name for its baseline
    cfg = load_config(second)
    cfg = cfg.model_copy(update={"probe": cfg.probe.model_copy(update={"enabled": False})})
    b = campaign.run(cfg, settings, reporter=PlainReporter(lines.append), config_file=str(second)).record
    assert [(v.name, v.reused) for v in b.variants] == [
        (n, {"custom/facts": N, "custom/sums": N}) for n in ("bf16", "w3", "same")]
    assert all(v.startup_seconds is None for v in b.variants)  # nothing served
    assert not (tmp_path / "runs" / "second" / "logs").exists()
    assert b.verdicts == a.verdicts and any("records reused from the shared store" in ln for ln in lines)
    assert [c.delta for c in b.comparisons] == [c.delta for c in a.comparisons]


def test_an_engine_that_never_comes_up_is_not_restarted(tmp_path):
    config = _campaign(tmp_path)
    write_checkpoint(tmp_path / "ck" / "w3", FakeEngineSpec(answers=_suites(tmp_path), start_delay_s=30))
    cfg = load_config(config)
    cfg = cfg.model_copy(update={"engine": cfg.engine.model_copy(update={"startup_timeout_s": 0.3, "max_restarts": 2})})
    rec = campaign.run(cfg, Settings(cache=tmp_path / "cache", share_records=False),
                       reporter=PlainReporter(lambda s: None), config_file=str(config)).record
    w3 = next(v for v in rec.variants if v.name == "w3")
    assert (w3.status, w3.restarts) == ("error", 0) and "not healthy" in w3.error  # one start, not three
    assert rec.verdicts["w3"] == "NOT_EVALUATED" and rec.verdicts["same"] == "PASS"


def test_a_kv_cache_variant_serves_the_base_under_its_own_key_and_says_so(tmp_path):
    """`engine: {kv_cache_dtype: fp8}` on a bf16 variant: the base checkpoint served again, under a key of its
    own (its records never stand for the baseline's), named in the record, the report and nothing else changed."""
    config = _campaign(tmp_path)
    cfg = yaml.safe_load(config.read_text())
    cfg["variants"][1] = {"name": "kv-fp8", "method": "bf16", "engine": {"kv_cache_dtype": "fp8"}}  # for `same`
    cfg["probe"]["enabled"] = False
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    campaign.run(load_config(config), Settings(cache=tmp_path / "cache", share_records=False),
                 reporter=PlainReporter(lambda s: None), config_file=str(config))
    run_dir = tmp_path / "runs" / "p"
    rec = {v["name"]: v for v in json.loads((run_dir / "run.json").read_text())["variants"]}
    assert rec["kv-fp8"]["kv_cache_dtype"] == "fp8" and rec["base"]["kv_cache_dtype"] is None
    assert rec["kv-fp8"]["checkpoint_hash"] == rec["base"]["checkpoint_hash"]
    assert rec["kv-fp8"]["key"] != rec["base"]["key"]
    assert "| kv-fp8 | bf16 + KV fp8 |" in (run_dir / "report.md").read_text()
    assert {v for (_, _, _, _, v, _, _) in _records(run_dir)} == {"base", "w3", "kv-fp8"}
