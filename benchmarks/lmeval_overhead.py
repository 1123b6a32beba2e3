"""Evaluation throughput: one lm-eval task through qeval (per-item records, request cache, parsing into
the store) against the plain `lm_eval` CLI on the same endpoint and settings, alternating.
Target: qeval's wall time at most 1.05x the plain run's.

With --batches K: a sequential gate's batches instead (the task's docs cut in K batches, lm-eval's --samples),
each batch in an lm-eval process of its own against every batch a call of one kept process (what a sequential
gate runs), alternating; the per-item scores of the two must be the same.

With --standin: the host's own work in one lm-eval call, no engine: a stand-in server (lmeval_standin.py) answers
every completion at once with well-formed logprobs, and lm-eval's call through qeval's kept worker is timed phase by
phase inside the worker (lmeval_phases_worker.py): process start and imports, the task index and build, the model
client, request building, tokenizing, the HTTP phase (with the stand-in's count of requests in flight: the most,
their mean while any is, the seconds none is), the request cache's reads and writes, scoring and the samples log,
then qeval's parsing of that log into records and the results store. Each scoring of oe_hellaswag_mc (lm-eval's
loglikelihood, qeval's next token) and oe_addition's generated answers (3-shot, up to its 462 documents) is run
with lm-eval as it comes (`lm-eval's own`) and as qeval's worker runs it, alternating; the per-item scores of the
two must be the same. `--delay` holds each answer that long, so that the requests in flight show the concurrency
the client reaches.

Run: .venv/bin/python benchmarks/lmeval_overhead.py [--task oe_sciq] [--limit 200] [--rounds 2] [--batches 4]
     .venv/bin/python benchmarks/lmeval_overhead.py --standin [--limit 2000] [--concurrency 209] [--delay 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from qeval.config import EngineSpec, LmEvalSuiteRef, VariantSpec
from qeval.engines import Endpoint
from qeval.engines.vllm import VllmEngine
from qeval.settings import Settings
from qeval.record.store import ResultsStore
from qeval.suites.lmeval import LmEvalSessions, _env, lmeval_argv, parse_samples, read_flags, run_lmeval
from qeval.suites.lmeval_tasks import materialize_tasks, resolve_tasks
from standin import free_port

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
GEN_DOCS = 462  # oe_addition's documents
PHASES = ("process start + imports", "task index", "task build", "client (tokenizer load)", "request building",
          "cache check", "tokenizing", "http", "cache writes during http", "cache writes after http",
          "scoring + writing samples", "parse + store (qeval)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", default="oe_sciq")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batches", type=int, default=0, help="time K batches: a process each against one kept")
    ap.add_argument("--standin", action="store_true", help="the host's phases against a server that answers at once")
    ap.add_argument("--concurrency", type=int, default=209, help="requests in flight (--standin)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds the stand-in holds each answer (--standin)")
    args = ap.parse_args()
    settings = Settings.from_env()
    if args.standin:
        standin(args, settings)
        return
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


def letter_ids(settings: Settings, tokenizer: Path) -> list[int]:
    """The tokenizer's ids of " A" .. " D": the stand-in lists them in every next-token answer."""
    code = ("import json, sys; from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(sys.argv[1]); "
            "print(json.dumps([t.encode(' ' + x, add_special_tokens=False)[-1] for x in 'ABCD']))")
    out = subprocess.run([str(settings.vllm.python), "-c", code, str(tokenizer)], capture_output=True, text=True,
                         check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}).stdout
    return json.loads(out.strip().splitlines()[-1])


def standin(args, settings: Settings) -> None:
    """lm-eval's call through qeval's worker against the stand-in, phase by phase: lm-eval as it comes against
    the worker as qeval runs it, each scoring, alternating."""
    tokenizer = settings.models / "smollm2-135m-instruct"
    port = free_port()
    server = subprocess.Popen([sys.executable, str(HERE / "lmeval_standin.py"), str(port), "--delay", str(args.delay),
                               "--listed", *map(str, letter_ids(settings, tokenizer))],
                              stdout=subprocess.PIPE, text=True)
    if server.stdout.readline().strip() != "ready":
        raise SystemExit("the stand-in server did not start")
    base = f"http://127.0.0.1:{port}"

    def stats(path: str, data: bytes | None = None) -> dict:
        with urllib.request.urlopen(urllib.request.Request(base + path, data=data), timeout=30) as r:
            return json.loads(r.read())

    ep = Endpoint(base_url=f"{base}/v1", model="standin", tokenizer=tokenizer, engine="vllm")

    def ref_of(task: str, limit: int, fewshot: int | None) -> LmEvalSuiteRef:
        return LmEvalSuiteRef(kind="lm_eval", tasks=[task], include_path=ROOT / "suites" / "lmeval", limit=limit,
                              num_fewshot=fewshot, num_concurrent=args.concurrency)

    mc, gen = ref_of("oe_hellaswag_mc", args.limit, 0), ref_of("oe_addition", min(args.limit, GEN_DOCS), None)
    # (scoring, the task's ref): multiple choice both ways, and a generated answer (its YAML's 3-shot)
    cases = (("loglikelihood", mc), ("next_token", mc), ("generate", gen))
    results: dict[tuple[str, str], list[dict]] = {}
    scores: dict[tuple[str, str], dict] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            include = materialize_tasks(mc, settings.data, tmp)  # every task file of the include path, both tasks'
            for r in range(args.rounds):
                for scoring, ref in cases:
                    for how in ("lm-eval's own", "qeval's worker")[::1 if r % 2 == 0 else -1]:
                        work = tmp / f"{scoring}-{'plain' if how.startswith('lm') else 'qeval'}-{r}"
                        args_ = lmeval_argv(settings.vllm.python, ref, ep, [ref.tasks[0]], include,
                                            work / "out", work / "cache")[3:]
                        top_k = ref.next_token_top_k if scoring == "next_token" else None
                        if top_k is not None:
                            args_[args_.index("--model") + 1] = "qeval-next-token"
                        flags = work / "flags.jsonl"
                        call = {"tasks": ref.tasks, "samples": None, "limit": ref.limit,
                                "output_path": str(work / "out"), "use_cache": str(work / "cache"),
                                "flags": str(flags) if top_k is not None else None}
                        stats("/reset", b"")
                        t0 = time.time()
                        p = subprocess.run([str(settings.vllm.python), str(HERE / "lmeval_phases_worker.py"),
                                            json.dumps({"args": args_, "call": call, "next_token_top_k": top_k,
                                                        "plain": how.startswith("lm"), "spawned": t0})],
                                           env=_env(settings.vllm, work, ep), capture_output=True, text=True)
                        wall = time.time() - t0
                        line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
                        if p.returncode != 0 or line is None:
                            raise SystemExit(f"{scoring}, {how}: the worker failed\n{p.stderr[-3000:]}")
                        got = json.loads(line[len("RESULT "):])
                        got["wall"], got["server"] = wall, stats("/stats")
                        t1 = time.perf_counter()
                        [samples] = (work / "out").rglob("samples_*.jsonl")
                        recs = parse_samples(samples, read_flags(flags) if top_k is not None else None)
                        with ResultsStore(work / "records.sqlite") as store:
                            store.put("v", "k", "bench", ref.tasks[0], recs)
                        got["parse + store (qeval)"] = time.perf_counter() - t1
                        results.setdefault((scoring, how), []).append(got)
                        scores[(scoring, how)] = {x.item_id: x.scores for x in recs}
                        print(f"round {r}: {scoring}, {how}: {wall:.1f} s in the worker, {len(recs)} records",
                              flush=True)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"\noe_hellaswag_mc, {mc.limit} docs, 0-shot; oe_addition, {gen.limit} docs, 3-shot; {args.concurrency} "
          f"requests in flight, the stand-in answering after {args.delay:g} s; seconds (mean of {args.rounds} "
          "rounds)\n")
    cols = list(results)
    mean = {c: {k: sum(x.get(k, 0.0) for x in results[c]) / len(results[c])
                for k in (*PHASES, "wall", "session", "evaluate")} for c in cols}
    print("| phase | " + " | ".join(f"{s}, {h}" for s, h in cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    for k in PHASES:
        print(f"| {k} | " + " | ".join(f"{mean[c][k]:.2f}" for c in cols) + " |")
    print("| **worker, start to end** | " + " | ".join(f"**{mean[c]['wall']:.2f}**" for c in cols) + " |")
    for k, name in (("requests", "requests"), ("most_in_flight", "most in flight"),
                    ("mean_in_flight_when_busy", "mean in flight while any"), ("busy_s", "http: s with any in flight"),
                    ("idle_s", "http: s with none in flight")):
        vals = [sum(x["server"][k] for x in results[c]) / len(results[c]) for c in cols]
        print(f"| {name} | " + " | ".join(f"{v:.0f}" if k in ("requests", "most_in_flight") else f"{v:.2f}"
                                           for v in vals) + " |")
    for scoring, _ in cases:
        same = scores[(scoring, "lm-eval's own")] == scores[(scoring, "qeval's worker")]
        print(f"{scoring}: per-item scores {'the same' if same else 'DIFFER'} "
              f"({len(scores[(scoring, 'lm-eval' + chr(39) + 's own')])} items)")


if __name__ == "__main__":
    main()
