"""Sequential gates in every view of a real record (the fake engine's campaign, conftest.stopped_campaign):
the gates table gives the items each gate used of those planned and its method, a NOT_RUN gate its own
shape and colour, a paragraph the items each variant saved; the CI summary the items and the engine time
saved (an estimate); JUnit a NOT_RUN gate as skipped, never as passed. A record of fixed-n gates reads as before."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from qeval.record.run import RunRecord
from qeval.report import html, junit, markdown

FIXED_N = Path(__file__).parents[1] / "fixtures" / "records" / "schema2-gpu.json"
GSD = "gsd (O'Brien-Fleming spending, 4 looks, futility 0.05)"


@pytest.fixture(scope="module")
def rec(stopped_campaign) -> RunRecord:
    return stopped_campaign.record


def _row(md: str, *starts: str) -> str:
    return next(line for line in md.splitlines() if line.startswith("| " + " | ".join(starts) + " |"))


def test_the_gates_table_says_where_each_sequential_gate_stopped(rec):
    md = markdown.render(rec)
    assert "| MDE | items used / planned | result | why |" in md
    assert "| 100 / 400 (gsd) | \u2718 **FAIL** (worse than the margin) |" in _row(md, "bad", "custom/facts / contains")
    assert "| 200 / 400 (gsd) | \u2714 **PASS** |" in _row(md, "same", "custom/sums / numeric")
    skipped = _row(md, "bad", "custom/sums / numeric")
    assert "| none (not run) | \u2013 **NOT_RUN** |" in skipped and "custom/facts/contains" in skipped
    assert f"**Sequential gates**, method: {GSD}." in md
    assert "- bad: 100 of 800 items evaluated, 700 saved (about " in md and md.count("; not run: custom/sums") == 1
    assert "- same: 400 of 800 items evaluated, 400 saved (about " in md
    facts = next(x for v in rec.variants if v.name == "bad" for x in v.suites if x.suite == "custom/facts")
    scores = _row(md, "bad", f"{facts.means['contains']:.3f} (contains, n=100 of 400)")
    assert scores.endswith("| not run | ")


def test_html_gives_not_run_its_own_badge_and_colour(rec):
    page = html.render(rec)
    assert '<td><span class="badge v-NOT_RUN">\u2013 <strong>NOT_RUN</strong></span></td>' in page
    assert '<td><span class="badge v-FAIL">\u2718 <strong>FAIL</strong></span> (worse than the margin)</td>' in page
    assert ".v-NOT_RUN {" in page and "<th>items used / planned</th>" in page and "<td>100 / 400 (gsd)</td>" in page
    assert "<strong>Sequential gates</strong>, method: gsd" in page


def test_the_ci_summary_gives_items_and_engine_time_saved(rec):
    summary = markdown.render_summary(rec)
    assert ("| bad | **FAIL** | 0 / 2 (1 not run) | custom/facts/contains: FAIL (worse than the margin) at 100 of 400 items "
            "(gsd) (delta "
            in summary)
    v = {x.name: x for x in rec.variants}
    # per variant: its evaluation seconds per item served, times the items its sequential gates saved
    seconds = v["bad"].eval_seconds / 100 * 700 + v["same"].eval_seconds / 400 * 400
    assert (f"Items saved by stopping early: 1,100 of 1,600 planned (500 evaluated); engine time saved: about "
            f"{markdown.duration(seconds)} (an estimate" in summary)
    assert summary.rstrip().endswith("Recommended: same (no weights memory measured for it, picked in campaign "
                                     "order): weights -, output tok/s at the SLO -")


def test_junit_skips_a_not_run_gate_and_carries_where_a_gate_stopped(rec):
    root = ET.fromstring(junit.render(rec).split("?>", 1)[1])
    bad = root.find("testsuite[@name='s/bad']")
    assert (bad.get("tests"), bad.get("failures"), bad.get("skipped")) == ("2", "1", "1")
    assert {p.get("name"): p.get("value") for p in bad.find("properties")} == {
        "items_evaluated": "100", "items_planned": "800", "items_saved": "700"}
    cases = {c.get("name"): c for c in bad.iter("testcase")}
    skipped = cases["custom/sums/numeric"]
    assert skipped.find("failure") is None and "custom/facts/contains" in skipped.find("skipped").get("message")
    failed = cases["custom/facts/contains"]
    props = {p.get("name"): p.get("value") for p in failed.find("properties")}
    assert props == {"sequential": GSD, "items_used": "100", "items_planned": "400"}
    assert failed.find("failure") is not None and "FAIL (worse than the margin) at 100 of 400 items (gsd)" in \
        failed.find("system-out").text
    assert failed.find("failure").get("type") == "shown_worse"
    same = root.find("testsuite[@name='s/same']")
    assert same.get("skipped") == "0"
    for case in same.iter("testcase"):  # passed: no failure, no skip, and still where it stopped
        assert case.find("failure") is None and case.find("skipped") is None
        assert "PASS at 200 of 400 items (gsd)" in case.find("system-out").text


def test_fixed_n_records_read_as_before():
    rec = RunRecord.load(FIXED_N)
    md = markdown.render(rec)
    assert "items used / planned" not in md and "Sequential gates" not in md
    assert "| **FAIL** |" not in md and "| \u2718 **FAIL** |" in md  # the gates table's verdicts carry their shape
    assert "Items saved" not in markdown.render_summary(rec)
    xml = junit.render(rec)
    assert "<skipped" not in xml and "<properties" not in xml
