"""Custom suites and lm-eval tasks against a real vLLM server."""

from __future__ import annotations

import json

import pytest

from qeval.config import LmEvalSuiteRef
from qeval.suites.custom import load_suite, run_custom, sample_seeds
from qeval.suites.lmeval import run_lmeval
from qeval.suites.lmeval_tasks import resolve_tasks

from .conftest import ROOT

pytestmark = pytest.mark.slow


def test_custom_suite_scores_every_item_and_resumes(server):
    _, endpoint = server
    suite = load_suite(ROOT / "suites" / "custom" / "capitals.yaml")
    got = []
    n = run_custom(suite, endpoint, set(), got.extend)
    assert n == len(suite.items) == len(got) == 53
    acc = sum(r.scores["contains"] for r in got) / len(got)
    assert acc > 0.5, acc  # measured 0.77 for SmolLM2-135M-Instruct bf16; chance is ~0
    assert all(r.prompt_hash and r.doc_hash and r.response is not None for r in got)
    # a rerun with everything done asks nothing of the server
    assert run_custom(suite, endpoint, {r.item_id for r in got}, got.extend) == 0
    # greedy decoding is deterministic: the same items again give the same answers
    again = []
    run_custom(suite, endpoint, {r.item_id for r in got[5:]}, again.extend)
    first = {r.item_id: r.response for r in got}
    assert again and all(first[r.item_id] == r.response for r in again)


def test_json_suite_scores_between_floor_and_ceiling(server):
    _, endpoint = server
    suite = load_suite(ROOT / "suites" / "custom" / "json_facts.yaml")
    got = []
    assert run_custom(suite, endpoint, set(), got.extend) == len(suite.items) == 26
    mean = {m: sum(r.scores[m] for r in got) / len(got) for m in ("json_schema", "json_valid", "year")}
    # measured for SmolLM2-135M-Instruct bf16: json_schema 0.62, json_valid 0.88, year 0.73; a suite at 0 or 1
    # could not show a regression
    assert 0.3 < mean["json_schema"] < 0.9 and 0.5 < mean["json_valid"] < 1, mean
    assert all(r.scores["json_valid"] >= r.scores["json_schema"] for r in got)  # the schema asks for more
    assert mean["json_valid"] > mean["json_schema"], mean  # and the model does not always give it


def test_two_samples_at_temperature_are_scored_kept_and_reproducible(server, tmp_path):
    _, endpoint = server
    lines = (ROOT / "suites" / "custom" / "capitals.jsonl").read_text().splitlines()[:12]
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "s.yaml").write_text("name: cap2\nitems: items.jsonl\nscorers: [{kind: contains}]\n"
                                     "generation: {max_tokens: 12, temperature: 0.8, samples: 2}\n")
    suite = load_suite(tmp_path / "s.yaml")
    first, again = [], []
    # one request at a time: vLLM is not batch-invariant, so answers of requests batched differently may
    # differ under load (seen in a cold CI run: 11 of 12); the seeds are what this test checks
    assert run_custom(suite, endpoint, set(), first.extend, concurrency=1) == 12
    run_custom(suite, endpoint, set(), again.extend, concurrency=1)
    for r in first:
        samples = r.extra["samples"]
        assert [s["seed"] for s in samples] == sample_seeds(r.item_id, 2)
        assert r.scores["contains"] == sum(s["scores"]["contains"] for s in samples) / 2
        assert r.response == samples[0]["response"]
    # sampling happens (measured: 9 of 12 items got two different answers) ...
    assert sum(len({s["response"] for s in r.extra["samples"]}) > 1 for r in first) >= 3
    # ... and vLLM honours the per-sample seeds: a rerun gives the same answers (measured: 12 of 12)
    by_id = {r.item_id: r.extra["samples"] for r in again}
    assert all(by_id[r.item_id] == r.extra["samples"] for r in first)


def test_lmeval_task_gives_paired_per_item_records(server, settings, tmp_path):
    _, endpoint = server
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["oe_arc_easy", "oe_addition"],
                         include_path=ROOT / "suites" / "lmeval", limit=30)
    tasks = resolve_tasks(ref, settings.data)
    out = {}
    run_lmeval(ref, tasks, endpoint, settings.vllm, settings.data, tmp_path,
               lambda t, recs: out.__setitem__(t.name, recs), tmp_path / "lmeval.log")
    gk, add = out["oe_arc_easy"], out["oe_addition"]
    assert len(gk) == len(add) == 30
    assert {r.item_id for r in gk} == {str(i) for i in range(30)}
    assert all(r.doc_hash and r.prompt_hash for r in gk + add)
    acc = sum(r.scores["acc"] for r in gk) / 30
    assert acc > 1 / 4, acc  # 4 choices per question; measured 0.40 at n=30 (0.49 at n=200)
    em = sum(r.scores["exact_match"] for r in add) / 30
    assert em > 0.05, em  # chance is ~0; measured 0.17 at n=30 (0.21 at n=200)
    # lm-eval's own aggregate agrees with the mean of our per-item records
    results = json.loads(next((tmp_path / "lmeval-out").rglob("results_*.json")).read_text())
    assert results["results"]["oe_arc_easy"]["acc,none"] == pytest.approx(acc)


def test_logprobs_suite_perplexity_and_self_agreement(server):
    from qeval.config import LogprobsSuiteRef
    from qeval.suites.logprobs import compare_chunks, load_logprobs_suite, perplexity, run_logprobs

    _, endpoint = server
    suite = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", chunks=4, top_k=5))
    a, b = [], []
    # one chunk at a time, so both passes batch alike (vLLM is not batch-invariant: a cold CI run under
    # load gave KL up to 0.0032 between two concurrent passes)
    assert run_logprobs(suite, endpoint, set(), a.extend, concurrency=1) == 4
    run_logprobs(suite, endpoint, set(), b.extend, concurrency=1)
    assert all(len(r.extra["tokens"]) > 150 and r.extra["lp"][0] is None for r in a)  # ~1200 chars of prose
    assert all(len(t) >= 5 for r in a for t in r.extra["top"][1:])  # top-k at every predicted position
    ppl = perplexity(a)
    assert 2 < ppl < 60, ppl  # real English technical prose for a 135M model
    same = compare_chunks(sorted(a, key=lambda r: r.item_id), sorted(b, key=lambda r: r.item_id))
    assert same.mismatched == [] and len(same.ids) == 4
    assert same.kl.max() < 1e-6 and same.top1.min() == 1.0  # a variant against itself


def test_logprobs_over_a_suites_own_prompts(server):
    """`corpus: suite:DESCRIPTOR`: the distribution probe reads the prompts the variant is graded on."""
    from qeval.config import LogprobsSuiteRef
    from qeval.suites.logprobs import load_logprobs_suite, perplexity, run_logprobs

    _, endpoint = server
    desc = ROOT / "suites/custom/capitals.yaml"
    suite = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", name="capitals-prompts", corpus=f"suite:{desc}",
                                                 chunks=10, top_k=5))
    prompts = [i.prompt for i in load_suite(desc).items[:10]]
    assert suite.chunks == prompts
    got = []
    assert run_logprobs(suite, endpoint, set(), got.extend) == 10
    assert all(len(r.extra["tokens"]) >= 3 for r in got)
    assert 1 < perplexity(got) < 1000
