"""Does a custom suite keep the server as busy as the latency probe does? At each concurrency, the suite
through `run_custom` (what a campaign calls: bounded concurrency, per-item scoring, each record written
to a results store as it arrives) and the probe's client (`run_concurrency`) replaying the very same
requests: the suite's chat prompts rendered by the server's own /tokenize, the suite's max_tokens,
greedy, stopping at EOS as the suite's requests do. Same prompts and outputs, so the server does the
same work: the ratio of request throughputs is the suite runner's own cost. Target: >= 0.90.

Alternating, `--rounds` rounds; one untimed suite pass first (compilation, prefix cache: after it both
arms see the same cache hits). Wall time counts from the first request to the last answer (the suite
is loaded and the prompts tokenized before). The server's /metrics counters check that both arms sent
the same prompt tokens and got the same output tokens.

Run: .venv/bin/python benchmarks/suite_throughput.py [--suite suites/custom/capitals.yaml] [--repeat 4]
     [--concurrency 4 8 16] [--rounds 2]
(needs `make setup`; starts its own server on 127.0.0.1 and stops it at the end)
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import tempfile
import time
from pathlib import Path

import httpx

from qeval.config import EngineSpec, VariantSpec
from qeval.engines import Endpoint
from qeval.engines.prometheus import parse
from qeval.engines.vllm import VllmEngine
from qeval.probe.client import run_concurrency
from qeval.probe.server_metrics import metrics_url
from qeval.settings import Settings
from qeval.record.store import ResultsStore
from qeval.suites.custom import CustomSuite, _request, load_suite, run_custom

ROOT = Path(__file__).resolve().parent.parent
COUNTERS = ("vllm:prompt_tokens", "vllm:generation_tokens", "vllm:prefix_cache_hits")


@dataclasses.dataclass
class Arm:
    requests: int
    wall_s: float
    cpu_s: float  # this process's CPU seconds: the client's cost
    served: dict[str, float]  # the server's counter increases over the arm

    @property
    def throughput(self) -> float:
        return self.requests / self.wall_s


def larger(suite: CustomSuite, repeat: int) -> CustomSuite:
    # the same items `repeat` times under new ids: a run long enough to time at c = 16
    items = [i.model_copy(update={"id": f"{i.id}#{k}"}) for k in range(repeat) for i in suite.items]
    return dataclasses.replace(suite, items=items)


def tokenized(endpoint: Endpoint, suite: CustomSuite) -> list[list[int]]:
    """The token ids the server builds from each item's request (chat template and all)."""
    gen = suite.descriptor.generation
    out = []
    with httpx.Client(base_url=endpoint.base_url.removesuffix("/v1"), timeout=30) as client:
        for item in suite.items:
            _, payload = _request(item, gen, endpoint.model)  # the request the suite sends
            body = ({"model": endpoint.model, "messages": payload["messages"], "add_generation_prompt": True}
                    if "messages" in payload else {"model": endpoint.model, "prompt": payload["prompt"]})
            r = client.post("/tokenize", json=body)
            r.raise_for_status()
            out.append(r.json()["tokens"])
    return out


def counters(endpoint: Endpoint) -> dict[str, float]:
    scrape = parse(httpx.get(metrics_url(endpoint.base_url), timeout=10).text)
    return {k: scrape.counters.get(k, 0.0) for k in COUNTERS}


def timed(endpoint: Endpoint, run) -> tuple[int, float, float, dict[str, float]]:
    before = counters(endpoint)
    cpu0, t0 = time.process_time(), time.perf_counter()
    n = run()
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    after = counters(endpoint)
    return n, wall, cpu, {k: after[k] - before[k] for k in COUNTERS}


def suite_arm(suite: CustomSuite, endpoint: Endpoint, c: int, store_path: Path) -> Arm:
    with ResultsStore(store_path) as store:
        def sink(recs) -> None:  # as the campaign's: every record stored as it arrives
            store.put("bench", suite.key, "bench", f"custom/{suite.name}", recs)

        n, wall, cpu, served = timed(endpoint, lambda: run_custom(suite, endpoint, set(), sink, concurrency=c))
    return Arm(n * suite.descriptor.generation.samples, wall, cpu, served)


def probe_arm(prompts: list[list[int]], max_tokens: int, endpoint: Endpoint, c: int) -> Arm:
    def go() -> int:
        run = asyncio.run(run_concurrency(endpoint.base_url, endpoint.model, prompts, max_tokens, c, 3600,
                                          headers=endpoint.headers, ignore_eos=False))
        bad = [r.error for r in run.results if not r.ok]
        if bad:
            raise SystemExit(f"probe requests failed: {bad[:3]}")
        return len(run.results)

    n, wall, cpu, served = timed(endpoint, go)
    return Arm(n, wall, cpu, served)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--suite", type=Path, default=ROOT / "suites" / "custom" / "capitals.yaml")
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[4, 8, 16])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    settings = Settings.from_env()
    suite = larger(load_suite(args.suite), args.repeat)
    if suite.descriptor.generation.samples != 1:
        raise SystemExit("use a suite with one sample per item: the probe replays one request per item")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        engine = VllmEngine(variant=VariantSpec(name="bench", method="bf16"),
                            checkpoint=settings.models / "smollm2-135m-instruct", spec=EngineSpec(kv_cache_gib=2),
                            settings=settings, log_dir=tmp)
        with engine as ep:
            prompts = tokenized(ep, suite)
            max_tokens = suite.descriptor.generation.max_tokens
            suite_arm(suite, ep, max(args.concurrency), tmp / "warmup.sqlite")
            print(f"server up in {engine.startup_seconds:.0f} s; suite {suite.name} x{args.repeat}: {len(prompts)} "
                  f"requests, {sum(map(len, prompts)) / len(prompts):.0f} prompt tokens each, max_tokens {max_tokens}; "
                  f"{args.rounds} alternating rounds")
            print(f"{'c':>3} {'suite req/s':>11} {'probe req/s':>11} {'ratio':>6}  {'out tok/req s|p':>15}  "
                  f"{'prompt tok s|p':>14}  {'client CPU ms/req s|p':>21}")
            for c in args.concurrency:
                s_arms, p_arms = [], []
                for r in range(args.rounds):
                    order = ("suite", "probe") if r % 2 == 0 else ("probe", "suite")
                    for arm in order:
                        if arm == "suite":
                            s_arms.append(suite_arm(suite, ep, c, tmp / f"s{c}-{r}.sqlite"))
                        else:
                            p_arms.append(probe_arm(prompts, max_tokens, ep, c))
                st = sum(a.throughput for a in s_arms) / len(s_arms)
                pt = sum(a.throughput for a in p_arms) / len(p_arms)

                def per_req(arms: list[Arm], key: str) -> float:
                    return sum(a.served[key] for a in arms) / sum(a.requests for a in arms)

                def cpu_ms(arms: list[Arm]) -> float:
                    return 1000 * sum(a.cpu_s for a in arms) / sum(a.requests for a in arms)

                tok = f"{per_req(s_arms, 'vllm:generation_tokens'):.2f}|{per_req(p_arms, 'vllm:generation_tokens'):.2f}"
                ptok = f"{per_req(s_arms, 'vllm:prompt_tokens'):.1f}|{per_req(p_arms, 'vllm:prompt_tokens'):.1f}"
                cpu = f"{cpu_ms(s_arms):.1f}|{cpu_ms(p_arms):.1f}"
                print(f"{c:>3} {st:>11.2f} {pt:>11.2f} {st / pt:>6.3f}  {tok:>15}  {ptok:>14}  {cpu:>21}")
                print(f"    per round: suite {', '.join(f'{a.throughput:.2f}' for a in s_arms)}; "
                      f"probe {', '.join(f'{a.throughput:.2f}' for a in p_arms)}")


if __name__ == "__main__":
    main()
