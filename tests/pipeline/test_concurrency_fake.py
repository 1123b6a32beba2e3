"""A campaign on the fake engine records, per variant and suite, the requests in flight it evaluated with: a suite
set to `auto` sized from the capacity the engine declared, its own number where the engine cannot say, a fixed
number as set; the same records either way (requests in flight change no result and no key)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.pipeline import campaign
from qeval.progress import PlainReporter
from qeval.settings import Settings
from tests.conftest import campaign_file, fake_checkpoint

N = 12


def _campaign(root: Path, auto: bool, noise_floor: bool = False) -> Path:
    items = [{"id": f"f{i}", "prompt": f"Name fact {i}.", "reference": f"fact-{i}"} for i in range(N)]
    (root / "facts.jsonl").write_text("".join(json.dumps(it) + "\n" for it in items))
    (root / "facts.yaml").write_text("name: facts\nitems: facts.jsonl\ngeneration: {max_tokens: 20}\n"
                                     "scorers: [{kind: contains}]\n")
    (root / "sums.jsonl").write_text("".join(json.dumps({"id": f"s{i}", "prompt": f"{i}+{i}?", "reference": str(2 * i)})
                                             + "\n" for i in range(N)))
    (root / "sums.yaml").write_text("name: sums\nitems: sums.jsonl\nscorers: [{kind: numeric}]\n")
    answers = [Path("../../facts.jsonl"), Path("../../sums.jsonl")]
    # the baseline says its KV cache holds 300 tokens; the variant's engine cannot say
    fake_checkpoint(root, "base", FakeEngineSpec(answers=answers, kv_cache_tokens=300))
    w = fake_checkpoint(root, "w", FakeEngineSpec(answers=answers, model="w"))
    facts = {"kind": "custom", "path": "facts.yaml", **({"concurrency": "auto", "max_concurrency": 64} if auto else {})}
    return campaign_file(root, name="conc", variants=[{"name": "w", "method": "checkpoint", "checkpoint": w}],
                         engine={"kind": "fake", "startup_timeout_s": 30, "max_num_seqs": 16},
                         suites=[facts, {"kind": "custom", "path": "sums.yaml", "concurrency": 3}],
                         gates={"rules": [{"match": "*", "margin": 0.4}]}, mlflow={"enabled": False},
                         extra={"noise_floor": {"enabled": True}} if noise_floor else None)


def _run(root: Path, auto: bool, noise_floor: bool = False):
    config = _campaign(root, auto, noise_floor)
    settings = Settings(cache=root / "cache", records=root / "shared.sqlite")
    return campaign.run(load_config(config), settings, reporter=PlainReporter(lambda s: None),
                        config_file=str(config)).record


def test_the_record_says_the_requests_in_flight_of_each_variant_and_suite(tmp_path):
    rec = _run(tmp_path, auto=True, noise_floor=True)
    # facts: its longest prompt ("Name fact 11.", 13 characters) bounded at 13 // 2 + 1 = 7 tokens, and 20 to
    # answer: 300 // 27 = 11 requests the cache holds (max_num_seqs 16, max_concurrency 64); the variant's
    # engine cannot say, so the entry's own number (8); sums as set
    got = {v.name: (v.concurrency, v.max_num_seqs) for v in rec.variants if v.role != "noise"}
    assert got == {"base": ({"custom/facts": 11, "custom/sums": 3}, 16),
                   "w": ({"custom/facts": 8, "custom/sums": 3}, None)}
    # the A/A repeats the baseline at one request in flight for every suite, and says what the baseline used
    (aa,) = [v for v in rec.variants if v.role == "noise"]
    assert aa.concurrency == {"custom/facts": 1, "custom/sums": 1}
    assert (rec.noise_floor.concurrency, rec.noise_floor.baseline_concurrency) == (1, got["base"][0])
    run_json = json.loads((tmp_path / "runs" / "conc" / "run.json").read_text())
    assert {v["name"]: v["concurrency"] for v in run_json["variants"] if v["role"] != "noise"} == \
        {n: c for n, (c, _) in got.items()}
    report = (tmp_path / "runs" / "conc" / "report.md").read_text()
    assert ("- base: custom/facts 11; custom/sums 3 (its engine: max_num_seqs 16, KV cache 300 tokens)\n"
            "- w: custom/facts 8; custom/sums 3\n") in report


def test_auto_changes_no_key_and_no_record(tmp_path):
    fixed, auto = tmp_path / "fixed", tmp_path / "auto"
    fixed.mkdir(), auto.mkdir()
    _run(fixed, auto=False), _run(auto, auto=True)

    def records(root: Path) -> list[tuple]:
        db = sqlite3.connect(root / "runs" / "conc" / "results.sqlite")
        return sorted(db.execute("SELECT variant_key, suite_key, item_id, response, scores FROM records"))

    assert records(fixed) == records(auto) and len(records(fixed)) == 4 * N
