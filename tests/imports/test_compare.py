"""`qeval compare` over a real lm-eval run (tests/fixtures/imports/lmeval): the verdict the campaign that wrote it
reached, from its files alone; and each bad input, derived from the real files, exits 2 naming the file and place."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from qeval.config import load_config
from qeval.errors import ConfigError
from qeval.record.run import RunRecord

from .comparisons import compare_file, comparison_file, refused

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "imports" / "lmeval"
GATES = {"rules": [{"match": "*", "margin": 0.15, "alpha": 0.05}]}  # the campaign's that wrote the fixture


def _copy(tmp_path: Path, variant: str) -> Path:
    dest = tmp_path / "in" / variant
    shutil.copytree(FIXTURE / variant, dest)
    return dest


def _one(folder: Path, pattern: str) -> Path:
    [f] = folder.glob(pattern)
    return f


def _file(tmp_path: Path, base: Path, cand: Path, gates: dict = GATES, **extra) -> Path:
    return comparison_file(tmp_path, "lm_eval", ("bf16", "int8"), base, cand, gates, **extra)


_compare, _refused = compare_file, refused


def test_the_command_line_reaches_the_campaigns_verdict_from_lm_evals_files(tmp_path):
    policy = tmp_path / "gates.yaml"
    policy.write_text(yaml.safe_dump(GATES))
    out = tmp_path / "runs" / "cmp"
    p = subprocess.run([sys.executable, "-m", "qeval.cli", "compare", "--baseline", f"bf16=lm_eval:{FIXTURE / 'bf16'}",
                        "--variant", f"int8={FIXTURE / 'int8'}", "--policy", str(policy), "--out", str(out),
                        "--no-mlflow"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr + p.stdout
    for name in ("run.json", "report.md", "report.html", "summary.md", "junit.xml", "results.sqlite",
                 "items-bf16.parquet", "items-int8.parquet", "comparison.yaml"):
        assert (out / name).is_file(), name
    r = RunRecord.load(out / "run.json")
    [c] = r.comparisons
    # the figures of the campaign that served bf16 and int8 and wrote these files (their README)
    assert (c.suite, c.metric, c.n_paired, c.unpaired_base, c.unpaired_variant) == ("lm_eval/oe_arc_easy", "acc", 30, 0, 0)
    assert (c.base_mean, c.variant_mean, c.delta, c.p_value) == pytest.approx((0.4, 0.4, 0.0, 1.0))
    assert (c.ci_low, c.ci_high, c.mde) == pytest.approx((-0.06099240644406554, 0.06099240644406554, 0.14355669300569915))
    assert c.binary and c.higher_is_better and c.interval_method == "newcombe-score-cc"
    assert [g.verdict for g in r.gates] == ["PASS"] and r.verdict == "PASS"
    # the per-item means are lm-eval's own aggregate
    agg = json.loads(_one(FIXTURE / "int8", "results_*.json").read_text())["results"]["oe_arc_easy"]["acc,none"]
    assert c.variant_mean == pytest.approx(agg)
    v = next(x for x in r.variants if x.name == "int8")
    assert v.method == "results" and v.imported is not None and v.engine == "" and v.probe is None
    assert (v.imported.format, v.imported.evaluator, v.imported.version, v.imported.model) == \
        ("lm_eval", "lm-eval", "0.4.13", "int8")
    assert [f.lines for f in v.imported.files][1] == 30
    assert v.imported.tasks["lm_eval/oe_arc_easy"].advisory == {"model_name": ["bf16", "int8"]}
    assert "## Source" in (out / "report.md").read_text()
    # the command line's comparison, written as a file, runs again to the same verdict
    again = subprocess.run([sys.executable, "-m", "qeval.cli", "compare", str(out / "comparison.yaml"), "--no-mlflow"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert RunRecord.load(out / "run.json").comparisons[0].ci_low == c.ci_low


def test_items_only_one_run_has_are_counted_and_named(tmp_path):
    cand = _copy(tmp_path, "int8")
    f = _one(cand, "samples_*.jsonl")
    f.write_text("".join(f.read_text().splitlines(keepends=True)[:25]))  # another --limit
    r = _compare(_file(tmp_path, FIXTURE / "bf16", cand)).record
    [c] = r.comparisons
    assert (c.n_paired, c.unpaired_base, c.unpaired_variant) == (25, 5, 0)
    facts = next(x for x in r.variants if x.name == "int8").imported.tasks["lm_eval/oe_arc_easy"]
    assert facts.unpaired == {"baseline": ["25", "26", "27", "28", "29"]} and "limit" in facts.unpaired_reason


def test_a_truncated_samples_file_exits_2_naming_its_line(tmp_path):
    cand = _copy(tmp_path, "int8")
    f = _one(cand, "samples_*.jsonl")
    f.write_text(f.read_text()[:-300])
    _refused(_file(tmp_path, FIXTURE / "bf16", cand), f"{f}:30:", "truncated?")


def test_a_duplicated_line_exits_2_naming_both_lines(tmp_path):
    cand = _copy(tmp_path, "int8")
    f = _one(cand, "samples_*.jsonl")
    lines = f.read_text().splitlines(keepends=True)
    f.write_text("".join(lines[:10] + [lines[3]] + lines[10:]))
    _refused(_file(tmp_path, FIXTURE / "bf16", cand), f"{f}:11:", "doc_id 3 twice (lines 4 and 11)")


def test_an_item_asked_differently_exits_2_naming_both_lines(tmp_path):
    cand = _copy(tmp_path, "int8")
    f = _one(cand, "samples_*.jsonl")
    lines = f.read_text().splitlines()
    s = json.loads(lines[6])
    s["prompt_hash"] = "0" * 64
    f.write_text("\n".join(lines[:6] + [json.dumps(s)] + lines[7:]) + "\n")
    base = _one(FIXTURE / "bf16", "samples_*.jsonl")
    _refused(_file(tmp_path, FIXTURE / "bf16", cand), f"{f}:7:", "item 6: prompt_hash differs", f"{base}:7")


def test_two_runs_in_one_folder_exit_2_and_ask_for_one(tmp_path):
    both = tmp_path / "in" / "both"
    shutil.copytree(FIXTURE / "int8", both)
    for f in (FIXTURE / "bf16").iterdir():
        shutil.copy(f, both)
    _refused(_file(tmp_path, FIXTURE / "bf16", both), str(both), "2 lm-eval runs", "name one of")


def test_disjoint_items_exit_2_naming_both_sources(tmp_path):
    cand = _copy(tmp_path, "int8")
    f = _one(cand, "samples_*.jsonl")
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    f.write_text("".join(json.dumps({**s, "doc_id": s["doc_id"] + 100}) + "\n" for s in rows))
    _refused(_file(tmp_path, FIXTURE / "bf16", cand), "no shared items", str(f),
             str(_one(FIXTURE / "bf16", "samples_*.jsonl")))


def test_a_changed_few_shot_setting_is_not_the_same_task(tmp_path):
    cand = _copy(tmp_path, "int8")
    r = _one(cand, "results_*.json")
    doc = json.loads(r.read_text())
    doc["configs"]["oe_arc_easy"]["num_fewshot"] = 5
    r.write_text(json.dumps(doc, indent=2))
    _refused(_file(tmp_path, FIXTURE / "bf16", cand), str(r), "configs.oe_arc_easy.num_fewshot differs: 0",
             "vs 5 in variant int8", "not the same task")


def test_another_format_exits_2_and_says_what_it_looks_like(tmp_path):
    log = tmp_path / "fp8.eval"
    log.write_bytes(b"PK\x03\x04")
    _refused(_file(tmp_path, FIXTURE / "bf16", log), str(log), "not lm-eval output", "inspect log")


def test_a_performance_rule_is_not_evaluated_and_the_variant_does_not_pass(tmp_path):
    perf = {**GATES, "performance": [{"metric": "max_output_throughput", "min_ratio": 1.2}]}
    r = _compare(_file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8", gates=perf)).record
    by = {g.suite: g for g in r.gates}
    assert by["lm_eval/oe_arc_easy"].verdict == "PASS"  # the quality gate is judged as before
    g = by["perf"]
    assert (g.verdict, g.finding, g.reason) == ("NOT_EVALUATED", "not_evaluated", "no performance figures: imported results")
    # a rule never judged is never a pass: the variant is NOT_EVALUATED, not PASS, and not FAIL either
    assert r.verdicts["int8"] == "NOT_EVALUATED" and r.verdict == "NOT_EVALUATED"
    junit = (tmp_path / "runs" / "cmp" / "junit.xml").read_text()
    assert '<skipped message="no performance figures: imported results"' in junit
    # a warn rule never changes a verdict, judged or not
    warn = {**GATES, "performance": [{"metric": "max_output_throughput", "min_ratio": 1.2, "action": "warn"}]}
    r = _compare(_file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8", gates=warn)).record
    assert [g.verdict for g in r.gates] == ["PASS", "NOT_EVALUATED"] and r.verdict == "PASS"


def test_a_sequential_rule_is_judged_at_fixed_n_with_a_note(tmp_path):
    fixed = _compare(_file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8")).record
    seq = {"rules": [{"match": "*", "margin": 0.15, "alpha": 0.05, "sequential": {"look_every": 10}}]}
    r = _compare(_file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8", gates=seq)).record
    [g], [f] = r.gates, fixed.gates
    assert g.sequential is None and g.items_used is None  # no look was taken: one judgement over all 30 items
    assert (g.verdict, g.lower_bound, g.upper_bound, g.p_exact) == (f.verdict, f.lower_bound, f.upper_bound, f.p_exact)
    assert g.reason.startswith("judged at fixed n: imported results are complete") and g.reason.endswith(f.reason)


def test_a_task_a_variant_lacks_is_not_evaluated_for_that_variant(tmp_path):
    # a second task in the baseline: the fixture's task copied under another name (its own samples file)
    base = _copy(tmp_path, "bf16")
    res = _one(base, "results_*.json")
    doc = json.loads(res.read_text())
    for section in ("results", "configs", "versions", "n-shot", "higher_is_better", "n-samples"):
        if "oe_arc_easy" in doc.get(section, {}):
            doc[section]["oe_arc_copy"] = doc[section]["oe_arc_easy"]
    res.write_text(json.dumps(doc, indent=2))
    samples = _one(base, "samples_oe_arc_easy_*.jsonl")
    shutil.copy(samples, samples.with_name(samples.name.replace("oe_arc_easy", "oe_arc_copy")))
    r = _compare(_file(tmp_path, base, FIXTURE / "int8")).record
    by = {g.suite: g for g in r.gates}
    assert by["lm_eval/oe_arc_easy"].verdict == "PASS"
    g = by["lm_eval/oe_arc_copy"]
    assert (g.metric, g.verdict, g.finding) == ("acc", "NOT_EVALUATED", "not_evaluated")
    assert "int8's results have no task lm_eval/oe_arc_copy" in g.reason
    assert r.verdicts["int8"] == "NOT_EVALUATED"
    v = next(x for x in r.variants if x.name == "int8")
    assert list(v.imported.missing) == ["lm_eval/oe_arc_copy"] and [s.suite for s in v.suites] == ["lm_eval/oe_arc_easy"]
    assert [c.suite for c in r.comparisons] == ["lm_eval/oe_arc_easy"]


def _answered_otherwise(tmp_path: Path, variant: str, as_name: str, docs: set[int]) -> Path:
    """A copy of a run whose given items were scored the other way (a second run that answered them otherwise)."""
    dest = tmp_path / "in" / as_name
    shutil.copytree(FIXTURE / variant, dest)
    f = _one(dest, "samples_*.jsonl")
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    f.write_text("".join(json.dumps({**r, "acc": 1.0 - r["acc"]} if r["doc_id"] in docs else r) + "\n" for r in rows))
    return dest


def test_the_baselines_second_run_is_the_noise_floor(tmp_path):
    again = _answered_otherwise(tmp_path, "bf16", "bf16-again", {7, 11})  # 2 of 30 answered otherwise
    cand = _answered_otherwise(tmp_path, "int8", "int8", {7})  # 1 of 30 otherwise than the baseline
    policy = tmp_path / "gates.yaml"
    policy.write_text(yaml.safe_dump(GATES))
    out = tmp_path / "runs" / "cmp"
    p = subprocess.run([sys.executable, "-m", "qeval.cli", "compare", "--baseline", f"bf16=lm_eval:{FIXTURE / 'bf16'}",
                        "--variant", f"int8={cand}", "--noise", f"bf16-again=lm_eval:{again}", "--policy", str(policy),
                        "--out", str(out), "--no-mlflow"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stderr + p.stdout
    assert yaml.safe_load((out / "comparison.yaml").read_text())["noise"]["name"] == "bf16-again"
    r = RunRecord.load(out / "run.json")
    nf = r.noise_floor
    assert nf is not None and nf.variant == "bf16-again" and nf.concurrency == 0
    [fig] = nf.figures
    assert (fig.suite, fig.metric, fig.figure, fig.n) == ("lm_eval/oe_arc_easy", "acc", "flip rate", 30)
    assert fig.value == pytest.approx(2 / 30)
    [w] = nf.within  # the variant disagrees with the baseline less than the baseline with itself
    assert (w.variant, w.value, w.floor) == ("int8", pytest.approx(1 / 30), pytest.approx(2 / 30))
    # the A/A is recorded as imported, never gated or given a verdict, and its comparison stays out of the variants'
    aa = next(v for v in r.variants if v.name == "bf16-again")
    assert aa.role == "noise" and aa.imported is not None and aa.imported.format == "lm_eval"
    assert set(r.verdicts) == {"int8"} and {g.variant for g in r.gates} == {"int8"}
    assert {c.variant for c in r.comparisons} == {"int8"} and [c.variant for c in nf.comparisons] == ["bf16-again"]
    report = (out / "report.md").read_text()
    assert "## Noise floor (A/A)" in report and "a second run of its\nevaluator, imported" in report
    assert "within the noise floor (6.7%)" in report


def test_the_noise_floor_is_for_imported_results_and_is_checked_as_a_variant_is(tmp_path):
    path = _file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8")
    doc = yaml.safe_load(path.read_text())
    doc["noise"] = {"name": "int8", "method": "results", "results": {"format": "lm_eval", "path": str(FIXTURE / "bf16")}}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="repeated"):
        load_config(path)
    again = _copy(tmp_path, "bf16")
    r = _one(again, "results_*.json")
    cfg = json.loads(r.read_text())
    cfg["configs"]["oe_arc_easy"]["num_fewshot"] = 5
    r.write_text(json.dumps(cfg, indent=2))
    doc["noise"] = {"name": "bf16-again", "method": "results", "results": {"format": "lm_eval", "path": str(again)}}
    path.write_text(yaml.safe_dump(doc))
    _refused(path, str(r), "num_fewshot differs", "variant bf16-again")
    served = {"name": "c", "model": {"builtin": "smollm2-135m-instruct"}, "baseline": {"name": "bf16", "method": "bf16"},
              "variants": [{"name": "int8", "method": "int8"}], "noise": doc["noise"],
              "suites": [{"kind": "custom", "path": str(ROOT / "suites/custom/capitals.yaml")}]}
    path.write_text(yaml.safe_dump(served))
    with pytest.raises(ConfigError, match="measures its noise floor with `noise_floor: true`"):
        load_config(path)


def test_a_comparison_file_serves_nothing_and_a_campaign_does_not_mix_the_two(tmp_path):
    with pytest.raises(ConfigError, match="model, suites come from the results themselves"):
        load_config(_file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8", model={"builtin": "smollm2-135m-instruct"},
                          suites=[{"kind": "custom", "path": str(ROOT / "suites/custom/capitals.yaml")}]))
    path = _file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8")
    doc = yaml.safe_load(path.read_text())
    doc["model"] = {"builtin": "smollm2-135m-instruct"}
    doc["variants"].append({"name": "w4", "method": "gptq"})
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError, match="either serves its variants or compares results"):
        load_config(path)
    from qeval.pipeline.plan import plan
    from qeval.settings import Settings

    with pytest.raises(ConfigError, match="qeval compare"):
        plan(load_config(_file(tmp_path, FIXTURE / "bf16", FIXTURE / "int8")), Settings(cache=tmp_path / "c"))
