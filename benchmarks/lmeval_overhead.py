"""Evaluation throughput: one lm-eval task through qeval (per-item records, request cache, parsing into
the store) against the plain `lm_eval` CLI on the same endpoint and settings, alternating.
Target: qeval's wall time at most 1.05x the plain run's.

With --batches K: a sequential gate's batches instead (the task's docs cut in K batches, lm-eval's --samples),
each batch in an lm-eval process of its own against every batch a call of one kept process (what a sequential
gate runs), alternating; the per-item scores of the two must be the same.

Run: .venv/bin/python benchmarks/lmeval_overhead.py [--task oe_sciq] [--limit 200] [--rounds 2] [--batches 4]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

from qeval.config import EngineSpec, LmEvalSuiteRef, VariantSpec
from qeval.engines.vllm import VllmEngine
from qeval.settings import Settings
from qeval.record.store import ResultsStore
from qeval.suites.lmeval import LmEvalSessions, lmeval_argv, run_lmeval
from qeval.suites.lmeval_tasks import materialize_tasks, resolve_tasks

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="oe_sciq")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", type=int, default=0, help="time K batches: a process each against one kept")
    args = ap.parse_args()
    settings = Settings.from_env()
    model = settings.models / "smollm2-135m-instruct"
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=[args.task], include_path=ROOT / "suites" / "lmeval", limit=args.limit)
    py = settings.python(settings.vllm_env)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        engine = VllmEngine(variant=VariantSpec(name="bench", method="bf16"), checkpoint=model,
                            spec=EngineSpec(kv_cache_gib=2), settings=settings, log_dir=tmp)
        with engine as ep:
            if args.batches:
                batches(args, ref, ep, settings, tmp)
                return
            env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
            env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1",
                       HF_DATASETS_CACHE=str(tmp / "hf"))
            plain_t, qeval_t = [], []
            for r in range(args.rounds):
                # plain: the same command lm-eval's users type, without per-sample logs or a request cache
                include = materialize_tasks(ref, settings.data, tmp / f"plain{r}")
                argv = lmeval_argv(py, ref, ep, [args.task], include, tmp / f"plain{r}" / "out", tmp / "unused")
                i = argv.index("--log_samples")
                argv = argv[:i] + argv[i + 1:]
                j = argv.index("--use_cache")
                argv = argv[:j] + argv[j + 2:]
                t0 = time.perf_counter()
                subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                plain_t.append(time.perf_counter() - t0)
                tasks = resolve_tasks(ref, settings.data)
                with ResultsStore(tmp / f"q{r}.sqlite") as store:
                    t0 = time.perf_counter()
                    run_lmeval(ref, tasks, ep, settings.vllm, settings.data, tmp / f"q{r}",
                               lambda t, recs: store.put("v", t.key, "bench", t.name, recs), tmp / f"q{r}.log")
                    qeval_t.append(time.perf_counter() - t0)
                    n = store.count()
                print(f"round {r}: plain lm_eval {plain_t[-1]:.1f} s, qeval {qeval_t[-1]:.1f} s ({n} records)")
            a, b = sum(qeval_t) / len(qeval_t), sum(plain_t) / len(plain_t)
            print(f"{args.task}, limit {args.limit}: qeval {a:.1f} s vs plain {b:.1f} s: ratio {a / b:.3f} "
                  f"(target <= 1.05)")


def batches(args, ref: LmEvalSuiteRef, ep, settings: Settings, tmp: Path) -> None:
    """The task's first `limit` docs in K batches: one lm-eval process per batch, against one kept process."""
    [task] = resolve_tasks(ref, settings.data)
    size = -(-args.limit // args.batches)
    cuts = [list(range(a, min(a + size, args.limit))) for a in range(0, args.limit, size)]
    times: dict[str, list[float]] = {"a process per batch": [], "one kept process": []}
    scores: dict[str, dict[str, dict]] = {}
    for r in range(args.rounds):
        for arm in list(times)[::1 if r % 2 == 0 else -1]:  # alternating: a change in the machine's load falls on both
            work = tmp / f"{arm.split()[0]}-{r}"
            got: dict[str, dict] = {}

            def sink(t, recs):
                got.update({x.item_id: x.scores for x in recs})

            t0 = time.perf_counter()
            kept = LmEvalSessions(ref, ep, settings.vllm, settings.data, work, work / "lmeval.log") \
                if arm == "one kept process" else None
            try:
                for k, docs in enumerate(cuts):
                    run_lmeval(ref, [task], ep, settings.vllm, settings.data, work / f"batch-{k + 1}", sink,
                               work / f"lmeval-batch-{k + 1}.log", samples={task.suite: docs}, sessions=kept)
            finally:
                if kept is not None:
                    kept.close()
            times[arm].append(time.perf_counter() - t0)
            scores[arm] = got
            print(f"round {r}: {arm}: {times[arm][-1]:.1f} s ({len(got)} records)", flush=True)
    same = scores["a process per batch"] == scores["one kept process"]
    a, b = (sum(v) / len(v) for v in times.values())
    print(f"{args.task}, {args.limit} docs in {len(cuts)} batches: a process per batch {a:.1f} s, one kept process "
          f"{b:.1f} s ({a - b:.1f} s saved, {(a - b) / max(1, len(cuts) - 1):.1f} s per batch after the first); "
          f"per-item scores {'the same' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
