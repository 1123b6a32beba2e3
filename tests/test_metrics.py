"""A metric's type and direction come from where it is defined, never from the values of one run."""

from __future__ import annotations

import numpy as np
import pytest

from qeval.config import load_policy
from qeval.errors import ConfigError
from qeval.suites.logprobs import LogprobsSuite
from qeval.suites.lmeval_tasks import task_metrics
from qeval.verdict.comparison import compare_metric
from qeval.verdict.gates import evaluate, evaluate_performance
from qeval.verdict.pairing import Paired

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent


def _paired(base: np.ndarray, cand: np.ndarray, metric: str) -> Paired:
    n = len(base)
    return Paired(ids=[f"{i:04d}" for i in range(n)], groups=[None] * n, base={metric: base}, cand={metric: cand},
                  unpaired_base=[], unpaired_cand=[])


def test_a_bit_identical_variant_passes_every_powered_gate_kl_included():
    """Same weights, its own engine: every item scores as the baseline's and KL is 0 on every chunk. The
    KL differences are all 0, which is not 0/1 data: no flip-rate MDE, no Newcombe interval for them."""
    policy = load_policy(ROOT / "examples/gates/demo.yaml")
    rng = np.random.default_rng(0)
    lp = LogprobsSuite(name="pydoc", chunks=["x"] * 32, top_k=10, key="k").metrics()
    acc = (rng.random(200) < 0.45).astype(float)
    comparisons = [
        compare_metric("same", "lm_eval/oe_arc_easy", "acc", True, _paired(acc, acc.copy(), "acc"),
                       policy.rules[2], policy, spec=task_metrics("oe_arc_easy", None, "")["acc"]),
        compare_metric("same", "logprobs/pydoc", "kl", True, _paired(np.zeros(32), np.zeros(32), "kl"),
                       policy.rules[3], policy, spec=lp["kl"]),
        compare_metric("same", "logprobs/pydoc", "top1", False, _paired(np.ones(32), np.ones(32), "top1"),
                       policy.rules[4], policy, spec=lp["top1"]),
    ]
    kl = comparisons[1]
    assert not kl.binary and kl.higher_is_better is False and kl.flip_rate is None
    assert kl.mde == 0 and (kl.ci_low, kl.ci_high) == (0, 0)
    gates = evaluate(policy, comparisons, ["same"])
    assert [(g.metric, g.verdict) for g in gates] == [("acc", "PASS"), ("kl", "PASS"), ("top1", "PASS")], \
        [g.reason for g in gates]


def test_lm_eval_metrics_are_declared_by_lm_eval_and_the_task():
    text = (ROOT / "suites/lmeval/oe_addition.yaml").read_text()
    m = task_metrics("oe_addition", text, "f.yaml")
    assert m["exact_match"].binary and m["exact_match"].higher_is_better
    # lm-eval's per-line perplexity is a log-likelihood its corpus aggregation turns into the figure: no
    # per-item score, so no declaration, and a task that lists it is refused
    assert "perplexity" not in m and "bleu" not in m
    with pytest.raises(ConfigError, match="'perplexity' is not a per-item score: lm-eval aggregates it over the "
                                          r"corpus \(perplexity\)"):
        task_metrics("t", "metric_list:\n  - metric: perplexity\n", "t.yaml")
    with pytest.raises(ConfigError, match=r"t.yaml:metric_list: acc: task t: metric 'acc' is not a per-item score"):
        task_metrics("t", "metric_list:\n  - metric: acc\n    aggregation: median\n", "t.yaml")
    own = task_metrics("t", "metric_list:\n  - metric: !function utils.score\n  - metric: judge\n"
                            "    higher_is_better: false\n  - metric: acc\n    higher_is_better: true\n", "t.yaml")
    assert own["judge"] == own["judge"].__class__(binary=False, higher_is_better=False, source=own["judge"].source)
    assert own["acc"].binary
    assert "unknown" not in own  # a metric nobody declared has no declaration (the gate then asks for one)


def test_an_undeclared_direction_fails_the_gate_and_asks_for_one():
    from qeval.record.metrics import UNDECLARED
    from qeval.verdict.policy import GatePolicy, GateRule

    rng = np.random.default_rng(1)
    b = rng.random(100)
    c = compare_metric("v", "lm_eval/t", "score", True, _paired(b, b + 0.01, "score"), GateRule(), GatePolicy(),
                       spec=UNDECLARED)
    [g] = evaluate(GatePolicy(), [c], ["v"])
    assert g.verdict == "FAIL" and "direction" in g.reason and g.finding == "undirected"
    [g] = evaluate(GatePolicy(rules=[GateRule(direction="higher")]), [c], ["v"])
    assert g.verdict == "PASS"


@pytest.mark.parametrize("action, verdict", [("warn", "WARN"), ("fail", "FAIL")])
def test_a_rule_on_a_figure_not_measured_acts_as_it_says(action, verdict):
    from qeval.verdict.policy import GatePolicy, PerfRule

    policy = GatePolicy(performance=[PerfRule(metric="max_output_throughput", min_ratio=0.8, action=action)])
    [g] = evaluate_performance(policy, "v", {"weights_bytes": 2.0}, {"weights_bytes": 1.0})
    assert g.verdict == verdict and "was not measured" in g.reason


@pytest.mark.parametrize("action, verdict", [("warn", "WARN"), ("fail", "INCONCLUSIVE")])
def test_a_simulated_variants_figures_show_nothing_either_way(action, verdict):
    """Served on its dequantized weights, a variant's weights and speed are the dense model's: a 1.0x weights
    ratio would FAIL a W4A16 scheme that in truth passes, and a faster one could PASS a slow kernel."""
    from qeval.verdict.policy import GatePolicy, PerfRule

    policy = GatePolicy(performance=[PerfRule(metric="weights_bytes", max_ratio=0.75, action=action)])
    why = "simulated automatically: no kernel"
    [g] = evaluate_performance(policy, "v", {"weights_bytes": 2.0}, {"weights_bytes": 2.0}, simulated=why)
    assert g.verdict == verdict and why in g.reason and "dequantized" in g.reason
    [real] = evaluate_performance(policy, "v", {"weights_bytes": 2.0}, {"weights_bytes": 2.0})
    assert real.verdict == ("FAIL" if action == "fail" else "WARN")  # the same figures, measured: what they say
