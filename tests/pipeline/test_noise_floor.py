"""The noise floor (A/A): the baseline evaluated again by a second server under another batch shape, its
disagreement with the first evaluation reported as the floor, and each variant read against it.

The campaign runs on the fake engine, whose `server_noise` makes each server of a checkpoint err on its own
items (by a hash of its served name), as an engine whose results depend on the batch; the floor and the
"within" notes are checked against the stored records directly (SQL), not against qeval's own sums."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.errors import ConfigError
from qeval.pipeline import campaign
from qeval.progress import PlainReporter
from qeval.record.run import Comparison
from qeval.settings import Settings
from qeval.verdict.noise import NoiseFloorSpec, floor_figures, within_floor
from tests.conftest import campaign_file, fake_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites" / "custom"
ANSWERS = [SUITES / "capitals.jsonl"]


def _campaign(root: Path, extra: dict | None = None, twin: str = "twin") -> Path:
    """`extra`: top-level keys after the gates (the A/A on unless told); `twin`: that variant's name."""
    fake_checkpoint(root, "base", FakeEngineSpec(answers=ANSWERS, server_noise=0.12))
    # another checkpoint that answers as the baseline does, with its own server's noise
    twin_ck = fake_checkpoint(root, "twin", FakeEngineSpec(model="twin", answers=ANSWERS, server_noise=0.12))
    bad = fake_checkpoint(root, "bad", FakeEngineSpec(model="bad", answers=ANSWERS, wrong_fraction=0.5,
                                                      server_noise=0.12))
    return campaign_file(
        root, name="aa",
        variants=[{"name": twin, "method": "checkpoint", "checkpoint": twin_ck},
                  {"name": "bad", "method": "checkpoint", "checkpoint": bad}],
        engine={"kind": "fake", "startup_timeout_s": 30},
        suites=[{"kind": "custom", "path": SUITES / "capitals.yaml"},
                {"kind": "logprobs", "name": "p", "corpus": "pydoc", "chunks": 6, "top_k": 5}],
        gates={"rules": [{"match": "*", "margin": 0.15}]}, mlflow={"enabled": False},
        extra={"noise_floor": True} if extra is None else extra)


def _run(root: Path, extra: dict | None = None):
    config = _campaign(root, extra)
    lines: list[str] = []
    res = campaign.run(load_config(config), Settings(cache=root / "cache", share_records=False),
                       reporter=PlainReporter(lines.append), config_file=str(config))
    return res, lines


def _scores(db: Path, variant: str) -> dict[str, float]:
    con = sqlite3.connect(db)
    rows = con.execute("SELECT item_id, scores FROM records WHERE variant = ? AND suite = 'custom/capitals'",
                       (variant,)).fetchall()
    return {i: json.loads(s)["contains"] for i, s in rows}


def _flip_rate(a: dict[str, float], b: dict[str, float]) -> float:
    assert a.keys() == b.keys()
    return sum(a[i] != b[i] for i in a) / len(a)


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    root = tmp_path_factory.mktemp("aa")
    res, lines = _run(root)
    return root, res, lines


def test_the_baseline_is_evaluated_again_under_its_own_key_and_never_gated(ran):
    root, res, lines = ran
    rec = res.record
    aa = next(v for v in rec.variants if v.name == "base-aa")
    base = next(v for v in rec.variants if v.name == "base")
    assert aa.role == "noise" and aa.status == "ok" and aa.key.startswith("aa:") and aa.key != base.key
    assert aa.checkpoint_hash == base.checkpoint_hash  # the same weights
    assert rec.verdicts.keys() == {"twin", "bad"}
    assert not [g for g in rec.gates if g.variant == "base-aa"]
    assert not [c for c in rec.comparisons if c.variant == "base-aa"]  # nor in the multiplicity correction
    assert len(_scores(res.run_dir / "results.sqlite", "base-aa")) == 53
    # another batch shape: one request at a time, where the baseline had 8 in flight on the custom suite
    nf = rec.noise_floor
    assert nf.variant == "base-aa" and nf.concurrency == 1
    assert nf.baseline_concurrency == {"custom/capitals": 8, "logprobs/p": 4}
    most = [int(m) for m in re.findall(r"at most (\d+) at once", (res.run_dir / "logs" / "engine-base-aa.log").read_text())]
    assert most == [1], most
    assert "base-aa" not in (res.run_dir / "junit.xml").read_text()  # nothing to pass or fail


def test_the_floor_and_the_variants_within_it_are_what_the_records_say(ran):
    root, res, _ = ran
    rec, db = res.record, res.run_dir / "results.sqlite"
    nf = rec.noise_floor
    base, aa = _scores(db, "base"), _scores(db, "base-aa")
    floor = {(f.suite, f.metric): f for f in nf.figures}
    flips = floor[("custom/capitals", "contains")]
    assert flips.figure == "flip rate" and flips.n == 53
    assert flips.value == pytest.approx(_flip_rate(base, aa)) and flips.value > 0
    assert floor[("logprobs/p", "kl")].value > 0 and floor[("logprobs/p", "kl")].figure == "mean KL"
    # within: 0 < the variant's disagreement <= the floor's, on each 0/1 metric (here contains and normalized)
    want = set()
    for name in ("twin", "bad"):
        rate = _flip_rate(base, _scores(db, name))
        if 0 < rate <= flips.value:
            want.add(name)
    got = {n.variant for n in nf.within if (n.suite, n.metric) == ("custom/capitals", "contains")}
    assert got == want and "bad" not in got
    # the flips of the A/A are listed like a variant's
    aa_flips = next(v for v in rec.variants if v.name == "base-aa").flips["custom/capitals"]
    assert aa_flips.lost + aa_flips.gained == round(flips.value * 53)


def test_the_report_shows_each_variant_next_to_the_floor(ran):
    _, res, _ = ran
    md = (res.run_dir / "report.md").read_text()
    assert "## Noise floor (A/A)" in md and "| suite / metric | figure | A/A (n) | twin | bad |" in md
    floor = next(f for f in res.record.noise_floor.figures if f.metric == "contains")
    assert f"| custom/capitals / contains | flip rate | {100 * floor.value:.1f}% (53) |" in md
    for n in res.record.noise_floor.within:
        assert f"- **{n.variant}**, {n.suite} / {n.metric}:" in md
    html = (res.run_dir / "report.html").read_text()
    assert "<h2>Noise floor (A/A)</h2>" in html and 'class="badge v-AA"' in html


def test_a_rerun_serves_nothing_and_keeps_the_floor(ran):
    root, res, _ = ran
    again, lines = _run(root)
    assert any("[base-aa] every suite already in the store" in line for line in lines), lines
    assert again.record.noise_floor.figures == res.record.noise_floor.figures


def test_without_it_there_is_no_second_evaluation_and_the_hash_is_unchanged(tmp_path):
    res, _ = _run(tmp_path)
    off, _ = _run(tmp_path / "off", extra={})
    assert off.record.noise_floor is None and "base-aa" not in {v.name for v in off.record.variants}
    written_off = load_config(_campaign(tmp_path / "f", extra={"noise_floor": False})).config_hash()
    assert written_off == load_config(_campaign(tmp_path / "g", extra={})).config_hash()
    assert res.record.config_hash != off.record.config_hash  # the A/A is part of the campaign


def test_its_name_may_not_be_taken_and_its_settings_are_checked(tmp_path):
    config = _campaign(tmp_path, twin="base-aa")
    with pytest.raises(ConfigError) as e:
        load_config(config)
    assert "base-aa" in str(e.value) and str(config) in str(e.value)
    assert NoiseFloorSpec.model_validate(True).enabled
    assert NoiseFloorSpec(enabled=True).shape([8, 4]) == 1 and NoiseFloorSpec(enabled=True).shape([1, 1]) == 8
    assert NoiseFloorSpec(enabled=True, concurrency=3).shape([1]) == 3


def _c(variant: str, suite: str, metric: str, *, binary: bool, flip_rate=None, mean=0.0) -> Comparison:
    return Comparison(variant=variant, suite=suite, metric=metric, primary=True, n_paired=10, unpaired_base=0,
                      unpaired_variant=0, base_mean=0.0, variant_mean=mean, delta=0.0, ci_low=0.0, ci_high=0.0,
                      interval_method="-", confidence=0.9, t_ci_low=0.0, t_ci_high=0.0, binary=binary,
                      flip_rate=flip_rate)


def test_within_is_no_more_than_the_floor_and_more_than_nothing():
    aa = [_c("b-aa", "custom/x", "ok", binary=True, flip_rate=0.1),
          _c("b-aa", "logprobs/p", "kl", binary=False, mean=0.02),
          _c("b-aa", "logprobs/p", "top1", binary=False, mean=0.95),
          _c("b-aa", "custom/x", "len", binary=False, mean=3.0)]  # a continuous score: no disagreement figure
    figures = floor_figures(aa, {("logprobs/p", "kl"): "mean KL", ("logprobs/p", "top1"): "top-1 disagreement"})
    assert [(f.metric, f.figure, round(f.value, 6)) for f in figures] == [
        ("ok", "flip rate", 0.1), ("kl", "mean KL", 0.02), ("top1", "top-1 disagreement", 0.05)]
    variants = [_c("v1", "custom/x", "ok", binary=True, flip_rate=0.1),  # equal: within
                _c("v2", "custom/x", "ok", binary=True, flip_rate=0.12),  # above
                _c("v3", "custom/x", "ok", binary=True, flip_rate=0.0),  # nothing to explain
                _c("v1", "logprobs/p", "kl", binary=False, mean=0.01),
                _c("v2", "logprobs/p", "top1", binary=False, mean=0.9),  # 10% disagreement > 5%
                _c("v1", "custom/other", "ok", binary=True, flip_rate=0.01)]  # no floor for that suite
    got = {(n.variant, n.suite, n.metric) for n in within_floor(variants, figures)}
    assert got == {("v1", "custom/x", "ok"), ("v1", "logprobs/p", "kl")}
