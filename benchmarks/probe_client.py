"""Does the latency probe's client time the engine or itself? A local server streams OpenAI-shaped SSE completions
on a fixed clock, however many are in flight: the first token `--ttft` after the request arrives, then one every
`--gap` (`--tokens` in all), then the usage chunk and [DONE]. So each request's TTFT, ITLs and TPOT are known,
and N requests at C in flight cannot finish before N / C x (ttft + (tokens - 1) x gap) (the floor). Each client
arm streams the same N requests at each concurrency:

- `httpx`: the probe's client as it was, on httpx (one AsyncClient, `max_connections` = C, every connection
  kept alive, each stream's lines read with `aiter_lines`);
- `qeval`: the probe's client now (`qeval.probe.client.run_concurrency`, on the suites' aiohttp client).

Each row gives the wall time against the floor, the client's CPU per request and as a share of one core (the
step's `client_cpu`, as the probe records it), and how far the client's TTFT, ITL and TPOT are from the
server's: a client busy with its own pool reads each chunk late, and the lateness is what it reports.

The server is a plain asyncio protocol (no framework) in its own process, each chunk written by a timer set
against the stream's start, so its own lateness does not add up along a stream; on a machine of few cores it
shares them with the client, and at the highest concurrency its timers fire late too: the last column is how
late they fired (the server's share of the error; the client's is the rest).

Run: .venv/bin/python benchmarks/probe_client.py [--requests-per-slot 4] [--concurrency 16 64 256]
     [--tokens 64] [--gap 0.01] [--ttft 0.02] [--arms httpx qeval]
(starts its own server on 127.0.0.1 and stops it at the end)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

import httpx

from qeval.probe.client import RequestResult, StepRun, run_concurrency
from standin import cpu_name, free_port

SERVER = r"""
import asyncio, json, socket, sys
from standin import Requests, listen
port, ttft, gap, tokens = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])

def chunk(data):
    return b"%x\r\n%s\r\n" % (len(data), data)

def event(obj):
    return chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")

TOKEN = event({"id": "cmpl-0", "object": "text_completion", "model": "m",
               "choices": [{"index": 0, "text": " tok", "logprobs": None, "finish_reason": None}]})
END = (event({"id": "cmpl-0", "object": "text_completion", "model": "m", "choices": [],
              "usage": {"prompt_tokens": 8, "completion_tokens": tokens, "total_tokens": 8 + tokens}})
       + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
late = []
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"

class Http(Requests):
    def connection_made(self, transport):
        super().connection_made(transport)
        # each chunk leaves when written, as an engine's server sends it (uvicorn sets it too): without it the
        # first token waits for the client to acknowledge the response's head, up to its delayed ACK's 40 ms
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def request(self, method, path, body):
        if path == b"/stats":  # how late the token timers fired since the last ask, then start over
            late.sort()
            body = json.dumps({"mean": sum(late) / max(1, len(late)) * 1000,
                               "p99": late[int(0.99 * (len(late) - 1))] * 1000 if late else 0.0}).encode()
            late.clear()
            self.t.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
            return
        loop = asyncio.get_running_loop()
        self.t.write(HEAD)
        start = loop.time()
        loop.call_at(start + ttft, self.send, start, 0)
    def send(self, start, k):
        if self.t.is_closing():
            return
        late.append(asyncio.get_running_loop().time() - (start + ttft + k * gap))
        self.t.write(TOKEN)
        if k + 1 < tokens:
            asyncio.get_running_loop().call_at(start + ttft + (k + 1) * gap, self.send, start, k + 1)
        else:
            self.t.write(END)

async def main():
    await listen(port, Http)

asyncio.run(main())
"""


async def httpx_stream_one(client: httpx.AsyncClient, model: str, prompt: list[int], max_tokens: int) -> RequestResult:
    """The probe's stream_one as it was on httpx, timing each chunk as the probe's does."""
    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
               "ignore_eos": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    res = RequestResult(ok=False, start=t0)
    last = None
    try:
        async with client.stream("POST", "/completions", json=payload) as r:
            if r.status_code != 200:
                res.error = f"HTTP {r.status_code}"
                return res
            async for line in r.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                now = time.perf_counter()
                if chunk.get("choices"):
                    if last is None:
                        res.ttft = now - t0
                    else:
                        res.itls.append(now - last)
                    last = now
                usage = chunk.get("usage")
                if usage:
                    res.output_tokens = usage.get("completion_tokens", 0)
        res.e2e = time.perf_counter() - t0
        res.last_token = None if last is None else last - t0
        res.ok = res.ttft is not None
    except (httpx.HTTPError, ValueError) as e:
        res.error = f"{type(e).__name__}: {e}"
    return res


async def httpx_arm(base: str, prompts: list, tokens: int, conc: int) -> StepRun:
    """The probe's run_concurrency as it was on httpx."""
    queue: asyncio.Queue = asyncio.Queue()
    for p in prompts:
        queue.put_nowait(p)
    results: list[RequestResult] = []
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits, verify=False) as client:
        cpu0, t0 = time.process_time(), time.perf_counter()

        async def worker() -> None:
            while not queue.empty():
                results.append(await httpx_stream_one(client, "m", queue.get_nowait(), tokens))

        await asyncio.gather(*(worker() for _ in range(conc)))
        return StepRun(results=results, wall=time.perf_counter() - t0, client_cpu=time.process_time() - cpu0)


async def qeval_arm(base: str, prompts: list, tokens: int, conc: int) -> StepRun:
    return await run_concurrency(base, "m", prompts, tokens, conc, max_seconds=3600)


ARMS: dict[str, Callable[[str, list, int, int], Awaitable[StepRun]]] = {"httpx": httpx_arm, "qeval": qeval_arm}


def p99(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=100)[98] if len(xs) > 1 else xs[0]


def row(name: str, conc: int, run: StepRun, n: int, floor: float, ttft: float, gap: float) -> str:
    ok = [r for r in run.results if r.ok]
    if len(ok) < n:
        errors = {r.error for r in run.results if not r.ok}
        return f"| {name} | {conc} | {n - len(ok)} of {n} failed: {sorted(errors)[:2]} | | | | | | | | |"
    ttft_err = [(r.ttft - ttft) * 1000 for r in ok]
    itl_err = [(x - gap) * 1000 for r in ok for x in r.itls]
    tpot_err = [(r.tpot - gap) * 1000 for r in ok]
    return (f"| {name} | {conc} | {run.wall:.2f} | {floor:.2f} | {floor / run.wall:.0%} | "
            f"{run.client_cpu / n * 1000:.2f} | {run.client_cpu / run.wall:.0%} | "
            f"{statistics.mean(ttft_err):.1f} / {p99(ttft_err):.1f} | {statistics.mean(itl_err):.2f} / "
            f"{p99(itl_err):.1f} | {statistics.mean(tpot_err):.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests-per-slot", type=int, default=4, help="requests per request in flight")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--gap", type=float, default=0.01, help="seconds between tokens")
    ap.add_argument("--ttft", type=float, default=0.02, help="seconds to the first token")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    args = ap.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(args.ttft), str(args.gap),
                               str(args.tokens)], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parent)  # `python -c` imports from its cwd
    if server.stdout.readline().strip() != "ready":
        raise RuntimeError("the server did not start")
    base = f"http://127.0.0.1:{port}/v1"
    per_request = args.ttft + (args.tokens - 1) * args.gap
    print(f"{cpu_name()}; {args.tokens} tokens a request, the first after {args.ttft * 1000:.0f} ms, then one "
          f"every {args.gap * 1000:.0f} ms ({per_request * 1000:.0f} ms a request)\n")
    print("| client | in flight | wall s | floor s | of floor | client CPU ms/request | client CPU, of a core | "
          "TTFT error ms, mean / p99 | ITL error ms, mean / p99 | TPOT error ms | server's lateness ms, mean / p99 |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    try:
        for conc in args.concurrency:
            n = conc * args.requests_per_slot
            floor = args.requests_per_slot * per_request
            prompts = [[100 + i % 1000] * 8 for i in range(n)]
            for name in args.arms:
                httpx.get(base.removesuffix("/v1") + "/stats")
                run = asyncio.run(ARMS[name](base, prompts, args.tokens, conc))
                late = httpx.get(base.removesuffix("/v1") + "/stats").json()
                print(row(name, conc, run, n, floor, args.ttft, args.gap) +
                      f" {late['mean']:.1f} / {late['p99']:.1f} |", flush=True)
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
