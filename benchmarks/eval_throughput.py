"""How close to the engine's own speed does qeval evaluate? On one served model and the same items:

- qeval's suites as a campaign runs them (each suite's `run` on a served variant, every record scored and put
  in a ResultsStore as it arrives, requests in flight sized from the engine as `auto` sizes them):
  `mc_loglikelihood` (lm-eval's multiple choice of oe_hellaswag_mc, 10,042 questions, scored by loglikelihood),
  `mc_next_token` (the same questions by qeval's next-token scoring), `generate` (lm-eval's oe_addition, a
  generated answer), `custom` (suites/custom/capitals.yaml repeated to the limit) and `logprobs` (the stdlib
  corpus, one 1,200-character chunk of the standard library's source per item, up to about 3,000). Items/s, and
  prompt and output tokens/s from the server's /metrics counters;
- `lmeval_offline`: lm-eval's own offline vLLM backend (`lm_eval --model vllm`) on the same task, documents,
  few-shot, seeds, dtype and max_model_len (its model load timed apart);
- `ceiling`: the engine alone on the same token counts: per qeval arm, as many requests of its mean prompt and
  output lengths, random token ids, all at once into vLLM's offline engine (the method of `vllm bench
  throughput`), and on a GPU the roofline of the arm's tokens from the GPU's peak bf16 FLOPs and memory
  bandwidth and the model's parameters (prefill compute-bound, decode reading the weights once per step).

Ratios side by side: qeval / lm-eval offline (items/s, the multiple-choice arms) and qeval / ceiling.
Random weights (llama-3-8b-random) make generation run to its token limit: the table says so beside those arms.
Everything runs offline: the tool env, the embedded model, the task data `qeval setup` extracted.

Run (GPU, `qeval setup --device cuda`, the 8B-shaped model made by scripts/make-random-llama.py):
    python benchmarks/eval_throughput.py --device cuda --model llama-3-8b-random --cuda-graphs --limit 2000 \
        --out runs/eval_throughput.json
CPU, small: python benchmarks/eval_throughput.py --limit 100 --only mc_next_token custom lmeval_offline ceiling
(starts its own server on 127.0.0.1 and stops it before the offline arms, which load the model themselves)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "eval_throughput_worker.py"
MC_TASK, GEN_TASK = "oe_hellaswag_mc", "oe_addition"
GEN_TASK_DOCS = 462  # oe_addition's documents: its limit is the smaller of this and --limit
QEVAL_ARMS = ("mc_loglikelihood", "mc_next_token", "generate", "custom", "logprobs")
ARMS = (*QEVAL_ARMS, "lmeval_offline", "ceiling")
COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")
RANDOM_MODELS = ("llama-3-8b-random",)
# what each arm's requests ask the engine for beyond tokens: lm-eval's loglikelihood sends `echo` with
# `logprobs: 1` (every prompt token's logprob and its top one), next-token scoring the top 20 of one generated
# token, the logprobs suite `echo` with its top_k (the defaults of its spec)
ARM_LOGPROBS: dict[str, dict[str, int]] = {
    "mc_loglikelihood": {"prompt_logprobs": 1, "logprobs": 1},
    "mc_next_token": {"logprobs": 20},
    "logprobs": {"prompt_logprobs": 10},
}

# peak dense bf16 tensor FLOP/s and memory bandwidth (bytes/s) from each maker's data sheet, by a piece of the
# name nvidia-smi gives (the longest piece that matches wins: "H100 PCIe" before "H100")
GPUS: dict[str, tuple[float, float]] = {
    "H200": (989e12, 4.8e12),
    "H100 NVL": (835e12, 3.9e12),
    "H100 PCIe": (756e12, 2.0e12),
    "H100": (989e12, 3.35e12),  # SXM, "NVIDIA H100 80GB HBM3"
    "A100-SXM4-80GB": (312e12, 2.039e12),
    "A100 80GB PCIe": (312e12, 1.935e12),
    "A100": (312e12, 1.555e12),  # 40 GB
    "L40S": (362e12, 0.864e12),
    "L4": (121e12, 0.3e12),
}


# -- pure figures (tests/test_eval_throughput.py) ---------------------------------------------------------------

@dataclass(frozen=True)
class Arm:
    """One arm's run: items evaluated, seconds from the first request to the last record, the engine's counters."""

    name: str
    items: int
    wall_s: float
    prompt_tokens: float = 0.0
    output_tokens: float = 0.0
    requests: float = 0.0
    concurrency: int | None = None  # requests in flight (None: the engine schedules all at once)
    note: str = ""

    @property
    def items_s(self) -> float:
        return self.items / self.wall_s if self.wall_s > 0 else math.nan

    def shape(self) -> dict[str, int] | None:
        """Its requests as the ceiling replays them: their number, mean prompt and output lengths, and the
        logprobs they ask the engine for (computing and returning those is the engine's work too)."""
        if self.requests <= 0:
            return None
        return {"name": self.name, "n": int(self.requests), "prompt": max(1, round(self.prompt_tokens / self.requests)),
                "output": max(1, round(self.output_tokens / self.requests)), **ARM_LOGPROBS.get(self.name, {})}


@dataclass(frozen=True)
class Gpu:
    name: str
    flops: float  # peak dense bf16, per second
    bandwidth: float  # memory, bytes per second


def known_gpu(name: str) -> Gpu | None:
    """The GPU's peaks from the table, by the longest piece of its name that matches (None: not in the table)."""
    hits = [k for k in GPUS if k.lower() in name.lower()]
    if not hits:
        return None
    k = max(hits, key=len)
    return Gpu(name, *GPUS[k])


def roofline_s(gpu: Gpu, params: float, weight_bytes: float, prompt_tokens: float, output_tokens: float,
               requests: float, batch: float) -> float:
    """The least time the GPU needs for these tokens: prefill at peak FLOPs (2 per parameter per token), then
    every token after each request's first (which prefill gives) decoded `batch` requests a step, each step
    bounded below by its FLOPs and by reading the weights once. Attention's FLOPs and KV-cache reads are left
    out: a bound from below."""
    prefill = 2 * params * prompt_tokens / gpu.flops
    decoded = max(0.0, output_tokens - requests)
    steps = decoded / max(1.0, min(batch, requests))
    decode = max(2 * params * decoded / gpu.flops, steps * weight_bytes / gpu.bandwidth)
    return prefill + decode


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b and not math.isnan(a) and not math.isnan(b) else None


def rows(arms: dict[str, Arm], ceiling: dict[str, float], roofline: dict[str, float]) -> list[dict[str, Any]]:
    """One row per arm: its rates, and beside them qeval / lm-eval offline (the multiple-choice arms, items/s)
    and qeval / ceiling and / roofline (the ceiling's seconds for the same tokens over the arm's)."""
    offline = arms.get("lmeval_offline")
    out = []
    for name, a in arms.items():
        out.append({
            "arm": name, "items": a.items, "wall_s": a.wall_s, "items_s": a.items_s,
            "prompt_tok_s": a.prompt_tokens / a.wall_s if a.wall_s > 0 else math.nan,
            "output_tok_s": a.output_tokens / a.wall_s if a.wall_s > 0 else math.nan,
            "concurrency": a.concurrency,
            "vs_lmeval_offline": ratio(a.items_s, offline.items_s) if offline and name.startswith("mc_") else None,
            "vs_ceiling": ratio(ceiling.get(name), a.wall_s),
            "vs_roofline": ratio(roofline.get(name), a.wall_s),
            "note": a.note})
    return out


def table(rows_: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table (an empty cell: not measured)."""
    cols = [("arm", "arm", "{}"), ("items", "items", "{}"), ("wall s", "wall_s", "{:.1f}"),
            ("items/s", "items_s", "{:.2f}"), ("prompt tok/s", "prompt_tok_s", "{:.0f}"),
            ("output tok/s", "output_tok_s", "{:.1f}"), ("in flight", "concurrency", "{}"),
            ("/ lm-eval offline", "vs_lmeval_offline", "{:.2f}"), ("/ ceiling", "vs_ceiling", "{:.2f}"),
            ("/ roofline", "vs_roofline", "{:.2f}"), ("note", "note", "{}")]

    def cell(fmt: str, v: Any) -> str:
        if v is None or v == "" or (isinstance(v, float) and math.isnan(v)):
            return ""
        return fmt.format(v)

    lines = ["| " + " | ".join(h for h, _, _ in cols) + " |", "|" + "|".join(" --- " for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(f, r.get(k)) for _, k, f in cols) + " |" for r in rows_]
    return "\n".join(lines)


def safetensors_size(folder: Path) -> tuple[int, int]:
    """The checkpoint's parameters and their bytes, from its safetensors headers (no tensor is read)."""
    params = nbytes = 0
    for f in sorted(folder.glob("*.safetensors")):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for k, t in header.items():
            if k == "__metadata__":
                continue
            params += math.prod(t["shape"])
            nbytes += t["data_offsets"][1] - t["data_offsets"][0]
    return params, nbytes


# -- the served arms -------------------------------------------------------------------------------------------

@dataclass
class StoreRun:
    """A campaign's SuiteRun (suites/base.py) for one variant with fixed-n gates: every record into the store as it
    arrives, the requests in flight each part used kept in `used`."""

    endpoint: Any
    settings: Any
    capacity: Any
    store: Any
    work: Path
    logs: Path
    variant: str = "bench"
    seed: int = 0
    timeout_s: float = 600.0
    retry_backoff_s: float = 1.0
    concurrency: int | None = None
    used: dict[str, int] = field(default_factory=dict)

    def done_ids(self, part) -> set[str]:
        return self.store.done_ids(self.variant, part.key)

    def used_concurrency(self, part, n: int) -> None:
        self.used[part.suite] = n

    def is_complete(self, part) -> bool:
        return self.store.is_complete(self.variant, part.key)

    def put(self, part, records) -> None:
        self.store.put(self.variant, part.key, self.variant, part.suite, records)

    def complete(self, part, n_items: int) -> None:
        self.store.mark_complete(self.variant, part.key, n_items)

    def skip(self, part) -> bool:
        return False

    def cuts(self, part, ids, groups):
        return None

    def look(self, part) -> bool:
        return False

    def finished(self, part) -> None:
        pass

    def stopping(self) -> bool:
        return False

    @contextlib.contextmanager
    def step(self, description: str, total: int | None = None):
        yield lambda n=1: None

    def log(self, message: str) -> None:
        print(message, flush=True)


def scrape(endpoint) -> dict[str, float]:
    import httpx

    from qeval.engines.prometheus import parse
    from qeval.probe.server_metrics import metrics_url

    s = parse(httpx.get(metrics_url(endpoint.base_url), timeout=30).text)
    return {k: s.counters.get(k, 0.0) for k in COUNTERS}


def suites(args, settings) -> dict[str, Any]:
    """Each qeval arm's suite, resolved as a campaign's `suites:` entry is (requests in flight: auto)."""
    from qeval.suites.custom import load_suite
    from qeval.suites.base import InFlight
    from qeval.suites.lmeval import LmEvalSuite
    from qeval.suites.lmeval_tasks import resolve_tasks
    from qeval.suites.logprobs import load_logprobs_suite
    from qeval.suites.spec import LmEvalSuiteRef, LogprobsSuiteRef

    include = ROOT / "suites" / "lmeval"
    out: dict[str, Any] = {}

    def lmeval(task: str, scoring: str, limit: int, fewshot: int | None):
        ref = LmEvalSuiteRef(kind="lm_eval", tasks=[task], include_path=include, limit=limit, num_fewshot=fewshot,
                             num_concurrent=args.concurrency, max_concurrency=args.max_concurrency,
                             scoring=[scoring])
        (t,) = resolve_tasks(ref, settings.data)
        return LmEvalSuite(ref, (t if scoring == "loglikelihood" else t.next_token(ref.next_token_top_k),))

    out["mc_loglikelihood"] = lmeval(MC_TASK, "loglikelihood", args.limit, args.num_fewshot)
    out["mc_next_token"] = lmeval(MC_TASK, "next_token", args.limit, args.num_fewshot)
    out["generate"] = lmeval(GEN_TASK, "loglikelihood", min(args.limit, GEN_TASK_DOCS), None)  # its YAML's 3-shot
    how = InFlight.of(args.concurrency, args.max_concurrency, fallback=8)
    capitals = load_suite(ROOT / "suites" / "custom" / "capitals.yaml", how)
    repeat = -(-args.limit // len(capitals.items))
    items = [i.model_copy(update={"id": f"{i.id}#{k}"}) for k in range(repeat) for i in capitals.items][:args.limit]
    out["custom"] = dataclasses.replace(capitals, items=items, key=f"{capitals.key}:x{len(items)}")
    out["logprobs"] = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", corpus="stdlib", chunks=args.limit,
                                                           concurrency=args.concurrency,
                                                           max_concurrency=args.max_concurrency))
    return out


def served_arms(args, settings, dtype: str, tmp: Path, progress=lambda arms: None) -> tuple[dict[str, Arm], dict[str, Any]]:
    from qeval.config import VariantSpec
    from qeval.engines.spec import VllmSpec
    from qeval.engines.vllm import VllmEngine
    from qeval.record.store import ResultsStore

    wanted = [a for a in QEVAL_ARMS if a in args.only]
    if not wanted:
        return {}, {}
    made = suites(args, settings)
    spec = VllmSpec(device="gpu" if args.device == "cuda" else "cpu", dtype=dtype, max_model_len=args.max_model_len,
                    enforce_eager=args.device == "cuda" and not args.cuda_graphs, kv_cache_gib=args.kv_cache_gib,
                    gpu_memory_utilization=args.gpu_memory_utilization if args.device == "cuda" else None,
                    startup_timeout_s=1200)
    engine = VllmEngine(variant=VariantSpec(name="bench", method="bf16"), checkpoint=settings.models / args.model,
                        spec=spec, settings=settings, log_dir=tmp)
    arms, facts = {}, {}
    with engine as ep:
        capacity = engine.capacity()
        facts.update(startup_s=engine.startup_seconds, engine_version=ep.engine_version,
                     kv_tokens=getattr(capacity, "kv_tokens", None), max_num_seqs=getattr(capacity, "max_num_seqs", None))
        print(f"server up in {engine.startup_seconds:.0f} s; capacity {capacity}", flush=True)
        # untimed: the custom suite's first items once, so the first arm timed meets a warm server
        with ResultsStore(tmp / "warmup.sqlite") as store:
            warm = dataclasses.replace(made["custom"], items=made["custom"].items[:32], key="warm-up")
            warm.run(StoreRun(endpoint=ep, settings=settings, capacity=capacity, store=store, work=tmp / "work" / "warm",
                              logs=tmp / "logs"))
        with ResultsStore(tmp / "records.sqlite") as store:
            for name in wanted:
                suite = made[name]
                run = StoreRun(endpoint=ep, settings=settings, capacity=capacity, store=store, work=tmp / "work" / name,
                               logs=tmp / "logs")
                run.logs.mkdir(parents=True, exist_ok=True)
                before = scrape(ep)
                t0 = time.perf_counter()
                suite.run(run)
                wall = time.perf_counter() - t0
                served = {k: v - before[k] for k, v in scrape(ep).items()}
                items = sum(len(store.done_ids(run.variant, p.key)) for p in suite.parts)
                note = "random weights: generation runs to its token limit" \
                    if args.model in RANDOM_MODELS and name in ("generate", "custom") else ""
                arms[name] = Arm(name, items, wall, served["vllm:prompt_tokens"], served["vllm:generation_tokens"],
                                 served["vllm:request_success"], max(run.used.values(), default=None), note)
                print(f"{name}: {items} items in {wall:.1f} s ({arms[name].items_s:.2f}/s), {served}", flush=True)
                progress(arms)
    return arms, facts


# -- the offline arms ------------------------------------------------------------------------------------------

def worker(settings, args, payload: dict, log: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1",
               DO_NOT_TRACK="1", TOKENIZERS_PARALLELISM="false", HF_DATASETS_CACHE=str(log.parent / "hf-datasets"))
    if args.device == "cpu":
        env["VLLM_CPU_KVCACHE_SPACE"] = str(args.kv_cache_gib)
    with log.open("w") as fh:
        p = subprocess.run([str(settings.vllm.python), str(WORKER), json.dumps(payload)], env=env, stdout=subprocess.PIPE,
                           stderr=fh, text=True)
    line = next((x for x in p.stdout.splitlines() if x.startswith("RESULT ")), None)
    if p.returncode != 0 or line is None:
        raise SystemExit(f"{payload['mode']} failed (exit {p.returncode}); log: {log}\n"
                         + "\n".join(log.read_text(errors="replace").splitlines()[-20:]))
    return json.loads(line[len("RESULT "):])


def engine_args(args, settings, dtype: str) -> dict:
    a = {"dtype": dtype, "max_model_len": args.max_model_len, "seed": 0}
    if args.device == "cuda":
        a.update(gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=not args.cuda_graphs)
    return a


def lmeval_offline(args, settings, dtype: str, tmp: Path) -> Arm:
    from qeval.suites.lmeval_tasks import materialize_tasks
    from qeval.suites.spec import LmEvalSuiteRef

    ref = LmEvalSuiteRef(kind="lm_eval", tasks=[MC_TASK], include_path=ROOT / "suites" / "lmeval")
    include = materialize_tasks(ref, settings.data, tmp / "offline")
    ckpt = str(settings.models / args.model)
    model_args = {"pretrained": ckpt, "tokenizer": ckpt, "add_bos_token": True,
                  **engine_args(args, settings, dtype)}
    r = worker(settings, args, {"mode": "lmeval", "model_args": model_args, "task": MC_TASK, "include": str(include),
                                "limit": args.limit, "num_fewshot": args.num_fewshot, "fewshot_seed": 1234},
               tmp / "lmeval-offline.log")
    s = r["served"]
    print(f"lmeval_offline: model load {r['load_s']:.0f} s; {r['items']} items in {r['wall_s']:.1f} s, acc {r['acc']}",
          flush=True)
    return Arm("lmeval_offline", int(r["items"]), r["wall_s"], s["vllm:prompt_tokens"], s["vllm:generation_tokens"],
               s["vllm:request_success"], None, f"loglikelihood; model load {r['load_s']:.0f} s apart")


def ceiling(args, settings, dtype: str, arms: dict[str, Arm], tmp: Path) -> dict[str, float]:
    """Seconds the engine alone takes for each qeval arm's requests (same number, same mean lengths)."""
    shapes = [s for a in arms.values() if a.name in QEVAL_ARMS and (s := a.shape())]
    if not shapes:
        return {}
    r = worker(settings, args, {"mode": "ceiling", "shapes": shapes,
                                "engine_args": {"model": str(settings.models / args.model), **engine_args(args, settings, dtype)}},
               tmp / "ceiling.log")
    return {k: v["wall_s"] for k, v in r["shapes"].items()}


def gpu_roofline(args, settings, arms: dict[str, Arm]) -> tuple[dict[str, float], dict[str, Any]]:
    if args.device != "cuda":
        return {}, {}
    name = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.splitlines()[0].strip()
    gpu = known_gpu(name)
    params, nbytes = safetensors_size(settings.models / args.model)
    facts = {"gpu": name, "params": params, "weight_bytes": nbytes,
             "peaks": dataclasses.asdict(gpu) if gpu else "not in the table: no roofline"}
    if gpu is None:
        return {}, facts
    return {a.name: roofline_s(gpu, params, nbytes, a.prompt_tokens, a.output_tokens, a.requests,
                               a.concurrency or a.requests)
            for a in arms.values() if a.name in QEVAL_ARMS and a.requests}, facts


def resumed(args, facts: dict[str, Any]) -> dict[str, Arm]:
    """The arms an earlier run of the same measurement left in --out (none if it differs or is absent)."""
    if not args.out or not args.out.is_file():
        return {}
    old = json.loads(args.out.read_text())
    same = ("model", "device", "dtype", "limit", "num_fewshot", "cuda_graphs")
    if any(old.get("facts", {}).get(k) != facts[k] for k in same):
        raise SystemExit(f"{args.out}: measured with other settings than these ({', '.join(same)}): "
                         "give another --out or drop --resume")
    if "server" in old["facts"]:
        facts["server"] = old["facts"]["server"]
    return {k: Arm(**a) for k, a in old.get("arms", {}).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--model", default=None, help="a builtin model (default: smollm2-135m-instruct on cpu, "
                                                  "llama-3-8b-random on cuda)")
    ap.add_argument("--limit", type=int, default=2000, help="items per arm (oe_addition has 462)")
    ap.add_argument("--num-fewshot", type=int, default=5, help="few-shot examples of the multiple-choice task")
    ap.add_argument("--cuda-graphs", action="store_true", help="CUDA graphs and torch.compile (else eager)")
    ap.add_argument("--concurrency", default="auto", help="requests in flight of qeval's suites: auto or a number")
    ap.add_argument("--max-concurrency", type=int, default=256)
    ap.add_argument("--max-model-len", type=int, default=2048)
    ap.add_argument("--kv-cache-gib", type=int, default=2, help="the CPU's KV cache")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    ap.add_argument("--only", nargs="+", choices=ARMS, default=list(ARMS), help="the arms to run")
    ap.add_argument("--out", type=Path, default=None, help="the figures as JSON")
    ap.add_argument("--resume", action="store_true",
                    help="keep the arms --out already holds (same model, limit and few-shot) and run only the others: "
                         "a run split over several invocations on one machine")
    args = ap.parse_args()
    args.model = args.model or ("llama-3-8b-random" if args.device == "cuda" else "smollm2-135m-instruct")
    args.concurrency = args.concurrency if args.concurrency == "auto" else int(args.concurrency)

    from qeval.machine.hardware import choose_dtype
    from qeval.settings import Settings

    settings = Settings.from_env()
    if not (settings.models / args.model / "config.json").is_file():
        raise SystemExit(f"{settings.models / args.model} is not built (scripts/make-random-llama.py or qeval setup)")
    dtype = choose_dtype("auto", {"gpu" if args.device == "cuda" else "cpu"}, settings.cpu).dtype
    facts: dict[str, Any] = {"model": args.model, "device": args.device, "dtype": dtype, "limit": args.limit,
                             "num_fewshot": args.num_fewshot, "cuda_graphs": args.cuda_graphs}
    kept = resumed(args, facts) if args.resume else {}
    if kept:
        args.only = [a for a in args.only if a not in kept]
        print(f"resumed: {', '.join(kept)} from {args.out}", flush=True)

    def save(arms: dict[str, Arm], ceil: dict[str, float], roof: dict[str, float]) -> None:
        # written after every arm too, so that a run cut short keeps the arms it finished
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"facts": facts, "ceiling_s": ceil, "roofline_s": roof,
                                            "rows": rows(arms, ceil, roof),
                                            "arms": {k: dataclasses.asdict(a) for k, a in arms.items()}},
                                           indent=1) + "\n")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        fresh, served = served_arms(args, settings, dtype, tmp, progress=lambda a: save({**kept, **a}, {}, {}))
        arms = {**kept, **fresh}
        if served:
            facts["server"] = served
        if "lmeval_offline" in args.only:  # the server has stopped: the offline engine has the device alone
            arms["lmeval_offline"] = lmeval_offline(args, settings, dtype, tmp)
            save(arms, {}, {})
        ceil = ceiling(args, settings, dtype, arms, tmp) if "ceiling" in args.only else {}
    roof, facts["roofline"] = gpu_roofline(args, settings, arms)
    out = rows(arms, ceil, roof)
    print(f"\n{args.model} on {args.device} ({dtype}), limit {args.limit}, {args.num_fewshot}-shot {MC_TASK}\n")
    print(table(out))
    save(arms, ceil, roof)
    if args.out:
        print(f"\nJSON: {args.out}")


if __name__ == "__main__":
    main()
