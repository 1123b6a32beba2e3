"""Tensor-parallel variants quantized in a task of their own on one GPU (the default, `quantize_gpus: 1`)
against inside their serving task, holding all their GPUs (`quantize_gpus: 2`): campaign wall time, and
whether the records are the same.

A real two-node Ray cluster on this machine (tests/ray_cluster.py) whose worker declares two GPUs (Ray counts
them and sets CUDA_VISIBLE_DEVICES; nothing runs on a GPU): the fake engine, served on both (tp 2), and the
fake quantizer, which takes `--quantize-s` per variant (real GPTQ on a 70B model takes hours: the fake stands in
for its duration only). With apart quantization, two variants quantize at once on the two GPUs while inline
ones hold both GPUs each, one after another; what that saves is about (variants - ceil(variants / 2)) x the
quantize time, less what the serving order costs.

Run: .venv/bin/python benchmarks/tp_quantize_apart.py [--variants 3] [--quantize-s 20] [--token-delay 0.02]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.ray_vs_local import QEVAL, cpu_kind, records, timed  # noqa: E402
from tests.ray_cluster import QUIET, Cluster  # noqa: E402
from tests.pipeline.test_ray_executor import tp_campaign  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", type=int, default=3)
    ap.add_argument("--quantize-s", type=float, default=20.0)
    ap.add_argument("--token-delay", type=float, default=0.02)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        cluster = Cluster(tmp / "ray").start(workers=1, gpus={"worker1": 2})
        times, runs = {}, {}
        try:
            for label, q in (("apart", 1), ("inline", 2)):
                root = tmp / label
                root.mkdir()
                cfg = tp_campaign(root, quantize_s=args.quantize_s, token_delay_s=args.token_delay,
                                  variants=args.variants)
                executor = f'{{kind: ray, address: "{cluster.address}", num_cpus: 0.25, quantize_gpus: {q}}}'
                cfg.write_text(cfg.read_text().replace("mlflow: {enabled: false}",
                                                       f"mlflow: {{enabled: false}}\nexecutor: {executor}"))
                # each run its own driver cache; the nodes' variant caches are emptied between runs
                env = {**os.environ, **QUIET, "QEVAL_CACHE": str(root / "driver"), "QEVAL_RECORDS": "off"}
                for node in cluster.nodes:
                    shutil.rmtree(node.cache / "variants", ignore_errors=True)
                times[label] = timed([*cluster.run_prefix, *QEVAL, "run", str(cfg), "--no-mlflow"], env,
                                     tmp / f"{label}.log")
                runs[label] = root / "runs" / "tp"
        finally:
            left = cluster.stop()
        print(f"{cpu_kind()}; {args.variants} quantized variants + baseline, "
              f"tp 2 on a worker declaring 2 GPUs, {args.quantize_s:g} s per quantization")
        for label, (secs, rc) in times.items():
            print(f"{label}: {secs:.1f} s (exit {rc})")
        same = records(runs["apart"]) == records(runs["inline"])
        print(f"saved: {times['inline'][0] - times['apart'][0]:.1f} s; records identical: {same}; "
              f"processes left: {len(left)}")


if __name__ == "__main__":
    main()
