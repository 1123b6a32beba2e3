"""The report opens like a sign-off document: title, description, the verdict per variant (a word and a shape,
and in HTML a colour), the recommendation and what was not evaluated, then the gates; each figure after the
table it illustrates. Checked on a GPU record an earlier qeval wrote (tests/fixtures/records), in the Markdown,
the HTML and the CI summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qeval.record.run import RunRecord
from qeval.report import html, markdown

RECORD = Path(__file__).parents[1] / "fixtures" / "records" / "schema2-gpu.json"
CLOSEST = ("No variant passes every gate. Closest: int8-w8a8 (2 of 10 gates not passed); first failing gate: "
           "custom/capitals / contains: INCONCLUSIVE (suite detects only drops >= 0.1080 > margin 0.0755)")


@pytest.fixture(scope="module")
def rec() -> RunRecord:
    return RunRecord.load(RECORD)


def _in_order(text: str, *marks: str) -> None:
    at = [text.index(m) for m in marks]
    assert at == sorted(at), list(zip(marks, at))


def test_markdown_opens_with_title_description_verdicts_recommendation_and_gaps(rec):
    md = markdown.render(rec)
    assert md.startswith(f"# qeval report: {rec.campaign}\n")
    _in_order(md, "# qeval report", rec.config["description"][:40], f"**Overall verdict: {rec.verdict}**",
              "| gptq-w4a16 | gptq | \u2718 FAIL |", "| int8-w8a8 | int8 | ? INCONCLUSIVE |", f"**{CLOSEST}**",
              "Not evaluated:", "- **modelopt-fp8 was not evaluated**: cut while being evaluated", "## Gates")
    assert "| bf16 | bf16 | \u25cf baseline |" in md and "| modelopt-fp8 | fp8 | \u25cb NOT_EVALUATED |" in md
    assert "<figure" not in md  # figures are the HTML's


def test_html_puts_the_title_first_and_each_figure_after_its_table(rec):
    page = html.render(rec)
    body = page.split("<body>", 1)[1]
    assert body.lstrip().startswith(f"<h1>qeval report: {rec.campaign}</h1>")
    _in_order(body, "<h1>", rec.config["description"][:40], 'id="verdict"', "<th>verdict</th>", CLOSEST[:50],
              "modelopt-fp8 was not evaluated", "<h2>Gates</h2>", 'id="figure-forest"', "<h2>Every comparison</h2>",
              "<h2>Performance</h2>", 'id="figure-tradeoff"', "<th>load</th>", 'id="figure-latency"',
              "<h2>Scores per suite</h2>")
    forest = body.index('id="figure-forest"')
    assert body.rindex("</table>", 0, forest) > body.index("<h2>Gates</h2>")  # after the gates table, not before
    assert f"Overall verdict: <strong>{rec.verdict}</strong>" in page  # as the browser test reads it
    assert '<td><span class="badge v-FAIL">\u2718 FAIL</span></td>' in page
    assert '<td><span class="badge v-INCONCLUSIVE">? INCONCLUSIVE</span></td>' in page
    assert re.search(r"\.v-PASS \{ background: #[0-9a-f]{6}; \}", page)
    assert page.count('src="data:image/png;base64,') == 3  # forest, trade-off, latency: each once


def test_a_passing_variant_is_recommended_in_the_report_and_the_summary(rec):
    passing = rec.model_copy(update={"verdicts": {**rec.verdicts, "int8-w8a8": "PASS", "fp8-dynamic": "PASS"}})
    # both show 156 MiB; int8-w8a8's weights are 1 KiB lighter
    line = ("Recommended: int8-w8a8 (the least weights memory among the 2 variant(s) that pass every gate): "
            "weights 156 MiB, output tok/s at the SLO 2,544.5")
    assert f"**{line}**" in markdown.render(passing)
    assert line in html.render(passing)
    summary = markdown.render_summary(passing)
    assert summary.rstrip().endswith(line)
    assert markdown.render_summary(rec).rstrip().endswith(CLOSEST)


def test_nothing_left_out_says_so(rec):
    whole = rec.model_copy(update={"variants": [v for v in rec.variants if v.status == "ok"]})
    md = markdown.render(whole)
    assert "Not evaluated:\n\n- nothing: every variant was evaluated" in md
    bare = whole.model_copy(update={"variants": [v.model_copy(update={"probe": None}) for v in whole.variants]})
    assert "- latency and throughput: no probe ran" in markdown.render(bare)
