"""Whole campaigns on the fake engine, in seconds: the baseline and each variant are fake servers (real
subprocesses on loopback), so plan -> serve -> suites -> store -> compare -> gate -> record -> report is
qeval's own code throughout; only the model is made up. Written against qeval.pipeline.campaign's public
functions (run, finish, plan) only."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from qeval.pipeline import campaign
from qeval.pipeline.campaign import CampaignResult
from qeval.config import load_config
from qeval.engines.fake import FakeEngineSpec
from qeval.progress import PlainReporter
from qeval.settings import Settings
from tests.conftest import MARK, Seen, campaign_file, fake_checkpoint, sees_marked

ROOT = Path(__file__).resolve().parents[2]
SUITES = ROOT / "suites" / "custom"
ANSWERS = [SUITES / "capitals.jsonl"]
CAPITALS = len((SUITES / "capitals.jsonl").read_text().splitlines())  # 53 items


# one campaign, one fake variant per scenario: each engine is its own server, so a fault stays in its variant
VARIANTS = {
    "q2": FakeEngineSpec(answers=ANSWERS, wrong=["france", "germany"]),
    "q12": FakeEngineSpec(answers=ANSWERS, wrong_fraction=0.25),
    "dies": FakeEngineSpec(answers=ANSWERS, dies_after=20),  # on its first start only
    "hangs": FakeEngineSpec(answers=ANSWERS, hangs_after=15, watchdog_interval_s=0.05, watchdog_timeout_s=0.2),
    "slow": FakeEngineSpec(answers=ANSWERS, start_delay_s=0.3),
    "late": FakeEngineSpec(answers=ANSWERS, start_delay_s=5.0),
}
ENGINE = {"late": {"startup_timeout_s": 0.3, "max_restarts": 0}}  # per-variant engine settings


def _write_campaign(root: Path) -> Path:
    """A campaign file under root: a fake baseline that answers every item right, and the VARIANTS, each
    a fake checkpoint that holds its spec."""
    fake_checkpoint(root, "base", FakeEngineSpec(answers=ANSWERS))
    variants = [{"name": name, "method": "checkpoint", "checkpoint": fake_checkpoint(root, name, spec),
                 **({"engine": ENGINE[name]} if name in ENGINE else {})} for name, spec in VARIANTS.items()]
    return campaign_file(
        root, name="fake", variants=variants,
        engine={"kind": "fake", "startup_timeout_s": 10, "max_restarts": 2, "retry_backoff_s": 0.05},
        suites=[{"kind": "custom", "path": SUITES / "capitals.yaml"}],
        gates={"rules": [{"match": "*", "margin": 0.15}]}, mlflow={"enabled": False})


@dataclass(frozen=True)
class Ran:
    root: Path
    config: Path
    result: CampaignResult
    lines: list[str]  # what the run logged
    live: Seen  # the run's servers as the search for them saw them while one served

    def variant(self, name: str):
        return next(v for v in self.result.record.variants if v.name == name)

    def log(self, name: str) -> str:
        return (self.root / "runs" / "fake" / "logs" / f"engine-{name}.log").read_text()

    def settings(self) -> Settings:
        return Settings(cache=self.root / "cache")


@pytest.fixture(scope="module")
def ran(tmp_path_factory) -> Ran:
    root = tmp_path_factory.mktemp("fake-campaign")
    config = _write_campaign(root)
    lines: list[str] = []
    token = uuid.uuid4().hex  # in every server's environment: what is left of them after the run
    seen: list[Seen] = []

    def log(line: str) -> None:
        lines.append(line)
        if not seen and line.startswith("[q2] custom/capitals"):  # its server up, serving the suite
            seen.append(sees_marked(token, "fake_server.py"))

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(MARK, token)
        result = campaign.run(load_config(config), Settings(cache=root / "cache"),
                              reporter=PlainReporter(log), config_file=str(config))
    assert seen, "no [q2] custom/capitals line: the search never looked while a server ran"
    return Ran(root, config, result, lines, seen[0])


def _answered(log: str) -> list[int]:
    """Per start of the fake server that ended by stop(), how many requests it answered (its log says)."""
    return [int(n) for n in re.findall(r"stopped after answering (\d+) requests", log)]


def test_the_plan_reads_the_campaign_without_serving(ran):
    p = campaign.plan(load_config(ran.config), ran.settings(), str(ran.config))
    assert [s.name for s in p.suites] == ["capitals"] and p.base_checkpoint == ran.root / "ck" / "base"


def test_wrong_answers_pass_or_fail_as_the_statistics_say(ran):
    record = ran.result.record
    assert (record.verdicts["q2"], record.verdicts["q12"]) == ("PASS", "FAIL")
    cap = next(c for c in record.comparisons if c.variant == "q2" and c.suite == "custom/capitals" and c.primary)
    assert cap.n_paired == CAPITALS and cap.delta == pytest.approx(-2 / CAPITALS)
    assert (cap.flips_base_only, cap.flips_variant_only) == (2, 0)
    assert record.gates
    for g in record.gates:  # each verdict is what its interval and the exact test say against the margin
        shown = g.lower_bound > -g.margin and (g.p_exact is None or g.p_exact <= g.alpha)
        assert g.verdict == ("PASS" if shown else "FAIL"), g.reason
    assert ran.variant("q2").suites[0].means["contains"] == pytest.approx((CAPITALS - 2) / CAPITALS)
    for name in ("base", "q2", "q12"):
        v = ran.variant(name)
        assert (v.status, v.engine, v.engine_version, v.restarts) == ("ok", "fake", "qeval-fake-1", 0)
        assert v.startup_seconds is not None and v.startup_seconds < 5
    assert ran.result.record_path.is_file() and ran.result.report_path.is_file()


def test_an_engine_that_dies_mid_suite_is_restarted_and_resumes_from_the_store(ran):
    dies = ran.variant("dies")
    assert (dies.status, dies.restarts) == ("ok", 1) and ran.result.record.verdicts["dies"] == "PASS"
    assert [s.n for s in dies.suites] == [CAPITALS]  # every item once
    log = ran.log("dies")
    assert "die after 20 requests" in log
    # the restarted server was asked only what the store lacked (and the requests cut in flight again)
    [second] = _answered(log)
    assert CAPITALS - 20 <= second < CAPITALS
    assert any(ln.startswith("[dies] engine failed") and "restart 1 of 2, resuming from the store" in ln
               for ln in ran.lines)


def test_a_hung_engine_is_found_by_the_watchdog_and_restarted(ran):
    hangs = ran.variant("hangs")
    assert (hangs.status, hangs.restarts) == ("ok", 1) and ran.result.record.verdicts["hangs"] == "PASS"
    assert [s.n for s in hangs.suites] == [CAPITALS]
    assert any(ln.startswith("[hangs] engine failed") and "the engine stopped answering" in ln for ln in ran.lines)
    assert "hang after 15 requests" in ran.log("hangs")


def test_a_slow_start_within_the_bound_works_and_beyond_it_is_not_evaluated(ran):
    slow, late = ran.variant("slow"), ran.variant("late")
    assert slow.status == "ok" and slow.startup_seconds >= 0.3 and ran.result.record.verdicts["slow"] == "PASS"
    assert late.status == "error" and "not healthy after 0 s" in late.error
    assert ran.result.record.verdicts["late"] == "NOT_EVALUATED" and ran.result.record.verdict == "NOT_EVALUATED"


def test_no_server_outlives_the_run(ran):
    ran.live.assert_gone()


def test_finish_gives_the_same_verdicts_from_the_store_serving_nothing(ran):
    before = {p.name for p in (ran.root / "runs" / "fake" / "logs").iterdir()}
    done = campaign.finish(load_config(ran.config), ran.settings(), config_file=str(ran.config),
                           reporter=PlainReporter(lambda s: None))
    assert done.record.verdicts == ran.result.record.verdicts
    assert {p.name for p in (ran.root / "runs" / "fake" / "logs").iterdir()} == before  # no engine started
