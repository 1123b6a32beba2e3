"""Which difference between the local and the ray executor moves a host-bound probe?

The 135M eager model's probe can run 2-2.6x faster in a packed Ray campaign (benchmarks/configs/gpu-smollm2-ray.yaml)
than in the serial one (gpu-smollm2.yaml) when the two run on different hosts. What differs for the engine:

- `local`: the serial campaign's server (gpu_memory_utilization 0.5), started from this process's environment;
- `omp2`:  the same with OMP_NUM_THREADS=2, as Ray gives a task of num_cpus 2;
- `kv`:    the packed campaign's memory settings (1/8 of the GPU, --kv-cache-memory-bytes 8 GiB);
- `ray`:   the packed campaign's server started and probed inside a real Ray task (num_cpus 2, num_gpus 0.125).

Each is started, probed with the campaign's probe (requests per step from --requests), and stopped, one after
another on one machine, in the order given (run it again reversed for drift). The JSON is rewritten after each
run, so a cut run keeps what finished.

Run (one NVIDIA GPU; `qeval setup --device cuda`, and Ray in qeval's venv):
    python benchmarks/probe_env.py --order local ray omp2 kv --json runs/probe_env.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

from qeval.config import VariantSpec, VllmSpec
from qeval.engines.vllm import VllmEngine
from qeval.probe.latency import run_probe
from qeval.probe.spec import ProbeSpec
from qeval.settings import Settings

PACKED = {"gpu_memory_utilization": 0.125, "extra_args": ["--kv-cache-memory-bytes", str(8 << 30)]}
SERIAL = {"gpu_memory_utilization": 0.5, "extra_args": []}


def measure(name: str, memory: dict, probe: dict, omp: str | None) -> dict:
    """Start the server, probe it, stop it: the figures per concurrency (runs here or inside a Ray task)."""
    before = os.environ.get("OMP_NUM_THREADS")
    if omp is not None:  # the engine inherits this process's environment; put it back for the next run
        os.environ["OMP_NUM_THREADS"] = omp
    try:
        return _measure(name, memory, probe)
    finally:
        if before is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = before


def _measure(name: str, memory: dict, probe: dict) -> dict:
    settings = Settings.from_env()
    spec = VllmSpec(device="gpu", enforce_eager=True, max_model_len=2048, dtype="bfloat16", startup_timeout_s=600,
                    **memory)
    out: dict = {"config": name, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                 "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "pid": os.getpid()}
    with tempfile.TemporaryDirectory() as tmp:
        eng = VllmEngine(variant=VariantSpec(name=name, method="bf16"), checkpoint=settings.models / "smollm2-135m-instruct",
                         spec=spec, settings=settings, log_dir=Path(tmp))
        t0 = time.monotonic()
        with eng as endpoint:
            out["start_s"] = round(time.monotonic() - t0, 1)
            t1 = time.monotonic()
            res = run_probe(ProbeSpec(**probe), endpoint, seed=0)
            out["probe_s"] = round(time.monotonic() - t1, 1)
    out["steps"] = {int(s.load): {"output_tok_s": s.output_throughput, "tpot_mean_ms": s.tpot_ms["mean"],
                                  "ttft_mean_ms": s.ttft_ms["mean"], "client_cpu_share": s.client_cpu_share}
                    for s in res.steps}
    out["warmup"] = res.warmup.__dict__ if res.warmup else None
    return out


def in_ray(probe: dict) -> dict:
    import ray  # the packed campaign's layout: a task of num_cpus 2 and an eighth of the GPU, on a local cluster

    ray.init(num_cpus=os.cpu_count(), num_gpus=1, include_dashboard=False, object_store_memory=256 << 20,
             log_to_driver=False)
    try:
        task = ray.remote(num_cpus=2, num_gpus=0.125, max_retries=0)(measure)
        return ray.get(task.remote("ray", PACKED, probe, None))
    finally:
        ray.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--order", nargs="+", default=["local", "ray", "omp2", "kv"],
                    choices=["local", "ray", "omp2", "kv"])
    ap.add_argument("--config", type=Path, default=Path("benchmarks/configs/gpu-smollm2.yaml"), help="its probe section")
    ap.add_argument("--requests", type=int, default=32, help="requests per step (the campaign's: 64)")
    ap.add_argument("--json", type=Path, default=Path("runs/probe_env.json"))
    args = ap.parse_args()
    probe = yaml.safe_load(args.config.read_text())["probe"] | {"requests_per_step": args.requests}
    host = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    doc = {"host": [ln for ln in host.splitlines() if ln.startswith(("Model name", "CPU(s)"))],
           "machine": platform.node(), "probe": probe, "runs": []}
    for name in args.order:
        run = in_ray(probe) if name == "ray" else measure(name, PACKED if name == "kv" else SERIAL, probe,
                                                           "2" if name == "omp2" else None)
        doc["runs"].append(run)
        print(name, json.dumps({c: round(v["tpot_mean_ms"], 2) for c, v in run["steps"].items()}),
              f"start {run['start_s']} s, probe {run['probe_s']} s, OMP {run['omp_num_threads']}", flush=True)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
