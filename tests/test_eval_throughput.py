"""benchmarks/eval_throughput.py's own arithmetic: the GPU roofline, the GPU table's lookup, the ceiling's request
shapes, the ratios and the Markdown table (the benchmark itself runs on a GPU machine, not in tests)."""

from __future__ import annotations

import importlib.util
import json
import math
import struct
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("eval_throughput", ROOT / "benchmarks" / "eval_throughput.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["eval_throughput"] = bench  # dataclasses look their module up by name
_spec.loader.exec_module(bench)


def test_the_longest_matching_name_picks_the_gpu():
    assert bench.known_gpu("NVIDIA H100 PCIe").bandwidth == 2.0e12
    assert bench.known_gpu("NVIDIA H100 80GB HBM3").bandwidth == 3.35e12
    assert bench.known_gpu("NVIDIA H200").bandwidth == 4.8e12
    assert bench.known_gpu("NVIDIA A100-SXM4-80GB").bandwidth == 2.039e12
    assert bench.known_gpu("Tesla T4") is None


def test_roofline_prefill_is_compute_bound_and_decode_reads_the_weights_once_a_step():
    gpu = bench.Gpu("x", flops=1e15, bandwidth=1e12)
    params, weights = 8e9, 16e9
    # 1,000 requests of 500 prompt tokens and one output token: prefill alone, 2 FLOPs a parameter a token
    assert bench.roofline_s(gpu, params, weights, 500_000, 1_000, 1_000, 64) == pytest.approx(2 * 8e9 * 5e5 / 1e15)
    # 64 requests of 129 output tokens at 64 in flight: 128 decode steps, each reading 16 GB at 1 TB/s (16 ms),
    # more than its FLOPs (64 tokens x 16 GFLOP = 1 ms)
    t = bench.roofline_s(gpu, params, weights, 0, 64 * 129, 64, 64)
    assert t == pytest.approx(128 * 16e9 / 1e12)
    # at 4,096 in flight a step's FLOPs outweigh its weight reads: compute-bound again
    t = bench.roofline_s(gpu, params, weights, 0, 4096 * 2, 4096, 4096)
    assert t == pytest.approx(2 * 8e9 * 4096 / 1e15)


def test_the_ceiling_replays_each_arms_requests_at_their_mean_lengths():
    arm = bench.Arm("custom", items=100, wall_s=10.0, prompt_tokens=4_050, output_tokens=1_200, requests=100)
    assert arm.shape() == {"name": "custom", "n": 100, "prompt": 40, "output": 12}
    assert bench.Arm("x", 1, 1.0).shape() is None  # no counters: nothing to replay


def test_rows_set_qeval_beside_lmeval_offline_and_the_ceiling():
    arms = {"mc_next_token": bench.Arm("mc_next_token", 200, 10.0, 40_000, 200, 200, 64),
            "custom": bench.Arm("custom", 100, 20.0, 4_000, 1_200, 100, 32, note="random weights"),
            "lmeval_offline": bench.Arm("lmeval_offline", 200, 40.0, 160_000, 800, 800)}
    out = {r["arm"]: r for r in bench.rows(arms, {"mc_next_token": 8.0, "custom": 18.0}, {"custom": 2.0})}
    assert out["mc_next_token"]["vs_lmeval_offline"] == pytest.approx(4.0)  # 20 items/s against 5
    assert out["mc_next_token"]["vs_ceiling"] == pytest.approx(0.8)  # the engine alone: 8 s for its tokens
    assert out["custom"]["vs_lmeval_offline"] is None  # lm-eval's offline arm is the multiple-choice task's
    assert out["custom"]["vs_roofline"] == pytest.approx(0.1)
    assert out["custom"]["output_tok_s"] == pytest.approx(60.0)
    assert out["lmeval_offline"]["vs_ceiling"] is None

    md = bench.table(list(out.values())).splitlines()
    assert md[0].startswith("| arm | items | wall s | items/s |") and len(md) == 5
    cells = [c.strip() for c in md[2].strip("|").split("|")]
    assert cells[:4] == ["mc_next_token", "200", "10.0", "20.00"] and cells[7] == "4.00" and cells[8] == "0.80"
    assert [c.strip() for c in md[3].strip("|").split("|")][-1] == "random weights"
    assert all(len(line.split("|")) == len(md[0].split("|")) for line in md)


def test_parameters_and_their_bytes_from_safetensors_headers(tmp_path):
    header = {"a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]},
              "b": {"dtype": "BF16", "shape": [8], "data_offsets": [64, 80]}, "__metadata__": {"format": "pt"}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(80))
    assert bench.safetensors_size(tmp_path) == (40, 80)
    assert math.isnan(bench.Arm("x", 0, 0.0).items_s)


def test_resume_keeps_the_arms_of_the_same_measurement_and_refuses_another(tmp_path):
    import argparse
    import json

    import pytest

    facts = {"model": "m", "device": "cuda", "dtype": "bfloat16", "limit": 2000, "num_fewshot": 0, "cuda_graphs": True}
    arm = bench.Arm("custom", 2000, 35.3, 51000.0, 24000.0, 2000.0, 256, "note")
    out = tmp_path / "x.json"
    out.write_text(json.dumps({"facts": {**facts, "server": {"kv_tokens": 9}},
                               "arms": {"custom": bench.dataclasses.asdict(arm)}}))
    args = argparse.Namespace(out=out)
    now = dict(facts)
    assert bench.resumed(args, now) == {"custom": arm}
    assert now["server"] == {"kv_tokens": 9}
    with pytest.raises(SystemExit, match="other settings"):
        bench.resumed(args, {**facts, "limit": 100})
    assert bench.resumed(argparse.Namespace(out=tmp_path / "none.json"), dict(facts)) == {}


def test_the_ceiling_asks_for_the_logprobs_the_suites_ask_for():
    from qeval.suites.spec import LmEvalSuiteRef, LogprobsSuiteRef

    assert bench.ARM_LOGPROBS["mc_next_token"]["logprobs"] == LmEvalSuiteRef.model_fields["next_token_top_k"].default
    assert bench.ARM_LOGPROBS["logprobs"]["prompt_logprobs"] == LogprobsSuiteRef.model_fields["top_k"].default
    shape = bench.Arm("mc_loglikelihood", 10, 1.0, 1000.0, 40.0, 40.0).shape()
    assert shape == {"name": "mc_loglikelihood", "n": 40, "prompt": 25, "output": 1, "prompt_logprobs": 1, "logprobs": 1}
    assert "logprobs" not in bench.Arm("custom", 10, 1.0, 100.0, 120.0, 10.0).shape()
