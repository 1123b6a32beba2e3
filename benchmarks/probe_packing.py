"""Does a latency probe stay honest when other engines share its GPU?

In a packed Ray run of gpu-smollm2 (benchmarks/configs/gpu-smollm2-ray.yaml) every probe holds the GPU's exclusive
lease, yet its figures can be ~20% off the serial run's, and a serial probe run again later up to 24% off too.
This separates the two causes on one machine, in one process, with one server under test:

- A: the target server alone, probed `--repeats` times (the noise floor between repeats);
- B: `--idle` more servers of the same model started on the same GPU and left idle (what a packed campaign's
  other variants are while one probes), the target probed again;
- C: those stopped, the target probed again (drift over time).

Each figure is printed per concurrency as the median over repeats, with B/A - 1 and C/A - 1 and A's own
spread (max/min - 1). Servers: qeval's VllmEngine, as a campaign starts them (127.0.0.1); probe: qeval's.

Run (one NVIDIA GPU; `qeval setup --device cuda`):
    python benchmarks/probe_packing.py --idle 6 --repeats 2 --json runs/probe_packing.json
The 8B model with CUDA graphs, whose bf16 probes agree within 3% from one run to the next:
    ... probe_packing.py --model llama-3-8b-random --graphs --idle 3 --fraction 0.22 --repeats 2 --steady 0.05 \
        --prompt-tokens 512 --output-tokens 128 --concurrency 1 16 64
`--steady 0.05`: each probe first warms up until two rounds agree within 5% (a server's first minutes can run
slower than its steady state); each probe's warm-up rounds are in the JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

from qeval.config import ProbeSpec, VariantSpec, VllmSpec
from qeval.engines.vllm import VllmEngine
from qeval.probe.latency import run_probe
from qeval.settings import Settings

FIGURES = (("ttft_mean_ms", "ttft_ms", "mean"), ("tpot_mean_ms", "tpot_ms", "mean"), ("tpot_p95_ms", "tpot_ms", "p95"))


def engine(name: str, settings: Settings, log_dir: Path, args) -> VllmEngine:
    spec = VllmSpec(device="gpu", enforce_eager=not args.graphs, max_model_len=2048, dtype="bfloat16",
                    gpu_memory_utilization=args.fraction, startup_timeout_s=900,
                    extra_args=["--kv-cache-memory-bytes", str(args.kv_bytes)])
    return VllmEngine(variant=VariantSpec(name=name, method="bf16"), checkpoint=settings.models / args.model,
                      spec=spec, settings=settings, log_dir=log_dir)


def probe_once(spec: ProbeSpec, endpoint, seed: int, warmups: list) -> dict[int, dict[str, float]]:
    out = {}
    res = run_probe(spec, endpoint, seed=seed)
    warmups.append(res.warmup.__dict__ if res.warmup else None)
    for s in res.steps:
        row = {"output_tok_s": s.output_throughput, "errors": float(s.errors), "client_cpu_share": s.client_cpu_share}
        row |= {name: getattr(s, field)[stat] for name, field, stat in FIGURES}
        out[int(s.load)] = row
    return out


def summarize(phases: dict[str, list[dict[int, dict[str, float]]]]) -> list[str]:
    lines = [f"{'c':>3} {'figure':>15} {'A median':>9} {'A spread':>9} {'B/A-1':>7} {'C/A-1':>7}"]
    first = phases["A"][0]
    for c in sorted(first):
        for fig in [f for f, *_ in FIGURES] + ["output_tok_s"]:
            med = {p: statistics.median(r[c][fig] for r in runs) for p, runs in phases.items() if runs}
            a_vals = [r[c][fig] for r in phases["A"]]
            spread = max(a_vals) / min(a_vals) - 1 if min(a_vals) > 0 else float("nan")
            rel = {p: med[p] / med["A"] - 1 for p in med if p != "A"}
            lines.append(f"{c:>3} {fig:>15} {med['A']:>9.2f} {spread:>8.1%} "
                         + " ".join(f"{rel.get(p, float('nan')):>+7.1%}" for p in ("B", "C")))
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="smollm2-135m-instruct", help="a model folder of the cache")
    ap.add_argument("--graphs", action="store_true",
                    help="CUDA graphs and torch.compile (the 8B model: its probe is GPU-bound, not host-bound)")
    ap.add_argument("--idle", type=int, default=6, help="servers started beside the target in phase B")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.125, help="each server's gpu_memory_utilization")
    ap.add_argument("--kv-bytes", type=int, default=8 << 30)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--output-tokens", type=int, default=32)
    ap.add_argument("--requests", type=int, default=32, help="requests per step")
    ap.add_argument("--steady", type=float, default=None,
                    help="warm up until two rounds agree within this fraction (ProbeSpec.warmup_until_steady)")
    ap.add_argument("--warmup-max", type=float, default=60, help="the steady warm-up's limit, seconds")
    ap.add_argument("--json", type=Path, default=Path("runs/probe_packing.json"))
    args = ap.parse_args()
    settings = Settings.from_env()
    spec = ProbeSpec(enabled=True, concurrency=args.concurrency, prompt_tokens=args.prompt_tokens,
                     output_tokens=args.output_tokens,
                     requests_per_step=args.requests, min_rounds_per_step=2, warmup_requests=4,
                     max_seconds_per_step=60, stop_after_saturation=False, warmup_until_steady=args.steady,
                     warmup_max_seconds=args.warmup_max)
    phases: dict[str, list] = {"A": [], "B": [], "C": []}
    warmups: dict[str, list] = {"A": [], "B": [], "C": []}
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as outer:
        t0 = time.monotonic()
        target = outer.enter_context(engine("target", settings, Path(tmp), args))
        timings["target_start_s"] = time.monotonic() - t0
        for phase in ("A", "B", "C"):
            with ExitStack() as idle:
                if phase == "B":
                    t0 = time.monotonic()
                    # all at once, as a packed campaign starts them (--kv-cache-memory-bytes: no memory profile)
                    others = [engine(f"idle{i}", settings, Path(tmp), args) for i in range(args.idle)]
                    for e in others:
                        idle.callback(e.stop)
                    with ThreadPoolExecutor(len(others)) as pool:
                        list(pool.map(lambda e: e.start(), others))
                    timings["idle_start_s"] = time.monotonic() - t0
                for r in range(args.repeats):
                    phases[phase].append(probe_once(spec, target, seed=r, warmups=warmups[phase]))
                    print(f"{phase}{r}: " + json.dumps({c: round(v["tpot_mean_ms"], 2) for c, v in phases[phase][-1].items()}),
                          flush=True)
    lines = summarize(phases)
    print("\n".join(lines))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "timings": timings,
                                     "phases": phases, "warmups": warmups, "summary": lines}, indent=1) + "\n")
    print(f"JSON: {args.json}")


if __name__ == "__main__":
    main()
