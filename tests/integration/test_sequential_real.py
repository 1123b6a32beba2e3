"""Sequential gates on real lm-eval and a real vLLM server: lm-eval runs a task in the seeded batches
(--samples), the baseline and the variant in the same calls so their few-shot prompts pair, and a task
whose gate is decided stops at that look; a logprobs suite stops by chunk."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.pipeline import campaign
from qeval.suites.lmeval import task_cuts
from qeval.progress import PlainReporter
from qeval.settings import Settings

from ..conftest import campaign_file

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_lmeval_and_logprobs_stop_at_the_look_that_decides(server, base_model, settings, tmp_path):
    _, endpoint = server
    ext = {"method": "external", "endpoint": endpoint.base_url, "served_model": endpoint.model,
           "checkpoint": base_model}
    # the same server under another name: an endpoint's key is its URL, so the variant's records are its own
    other = {**ext, "endpoint": endpoint.base_url.replace("127.0.0.1", "localhost")}
    cfg_path = campaign_file(
        tmp_path, name="seq", model={"path": base_model}, output_dir=tmp_path / "runs",
        baseline={"name": "base", **ext}, variants=[{"name": "same", **other}],
        suites=[{"kind": "lm_eval", "include_path": ROOT / "suites/lmeval", "tasks": ["oe_addition"], "limit": 60},
                {"kind": "logprobs", "name": "pydoc", "corpus": "pydoc", "chunks": 40, "top_k": 5}],
        gates={"rules": [{"match": "*", "margin": 0.3}],
               "sequential": {"method": "gsd", "look_every": 20, "min_items": 20}},
        mlflow={"enabled": False})
    cfg = load_config(cfg_path)
    s = Settings(cache=settings.cache, share_records=False)
    res = campaign.run(cfg, s, reporter=PlainReporter(lambda m: None), config_file=str(cfg_path))
    rec = res.record
    assert rec.verdicts == {"same": "PASS"}, [(g.suite, g.metric, g.verdict, g.reason) for g in rec.gates]
    gates = {g.suite: g for g in rec.gates}
    lm = gates["lm_eval/oe_addition"]
    # the same server on both sides: decided before the last look (z crosses O'Brien-Fleming's bound at 40)
    assert lm.sequential.startswith("gsd") and lm.items_planned == 60 and lm.items_used < 60, lm
    kl = gates["logprobs/pydoc"]
    assert kl.items_planned == 40 and kl.items_used < 40, kl
    db = sqlite3.connect(res.run_dir / "results.sqlite")
    rows = dict(db.execute("SELECT variant || ' ' || suite, COUNT(*) FROM records GROUP BY variant, suite"))
    assert rows["base lm_eval/oe_addition"] == 60  # the baseline runs every batch
    assert rows["same lm_eval/oe_addition"] == lm.items_used
    assert rows["same logprobs/pydoc"] == kl.items_used
    # the variant's docs are the first batches of the seeded order, lm-eval's doc ids as planned
    key = next(v.key for v in rec.variants[1].suites if v.suite == "lm_eval/oe_addition")
    part = next(k for k in campaign.plan(cfg, s, str(cfg_path)).parts() if k.key == key)
    cuts = task_cuts(cfg.seed, part.key, (20, 40, 60), 60)
    want = {str(i) for b in cuts[: lm.items_used // 20] for i in b}
    got = {r[0] for r in db.execute("SELECT item_id FROM records WHERE variant='same' AND suite_key=?", (key,))}
    assert got == want
    # paired by prompt: every stored prompt hash of the variant is the baseline's for that doc
    hashes = {(v, i): h for v, i, h in db.execute("SELECT variant, item_id, prompt_hash FROM records WHERE suite_key=?",
                                                 (key,))}
    assert all(hashes[("same", i)] == hashes[("base", i)] for i in got)
