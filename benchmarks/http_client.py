"""Can qeval's HTTP client keep many requests in flight? A local server answers OpenAI-shaped
/v1/completions and /v1/chat/completions after a fixed delay, however many requests are in flight, so N
requests at concurrency C cannot finish before N / C * delay (the server floor); the client's own cost is
what it adds to that. Each client arm sends the same N requests at each concurrency:

- `httpx-custom`: httpx as the custom suite used it: one AsyncClient, `Limits(max_connections=C)` (the
  keep-alive pool left at httpx's default of 20 connections), an asyncio.Semaphore(C);
- `httpx-logprobs`: httpx as the logprobs suites used it: one AsyncClient with httpx's default limits (100
  connections, 20 kept alive), an asyncio.Semaphore(C);
- `httpx-tuned`: httpx as far as its settings go: HTTP/1.1 only, every connection kept alive
  (`max_keepalive_connections=C`), no pool timeout, no proxy lookup from the environment;
- `httpx2-tuned`: the same settings through httpx2, pydantic's fork of httpx (installed with huggingface_hub),
  whose connection pool no longer walks every connection for every request;
- `aiohttp`: one ClientSession, `TCPConnector(limit=C)`, an asyncio.Semaphore(C);
- `qeval`: the suites' shared client (`qeval.suites.http`), as the suites call it now.

The server is as cheap as a server can be, so that it is not what is measured: a plain asyncio protocol
(no framework) in its own processes (`--server-procs`, sharing the port through SO_REUSEPORT) that
parses a request's head and body and answers with a canned body, with a listen backlog of 4096. The
lowest concurrency checks it: there every arm should reach the floor. On a machine of few cores the
client and server share them, so the client's CPU seconds per request are printed too.

Run: .venv/bin/python benchmarks/http_client.py [--requests 2000] [--concurrency 16 64 256]
     [--delay 0.2] [--arms httpx-custom httpx-logprobs httpx-tuned aiohttp qeval] [--server-procs 1]
(starts its own server on 127.0.0.1 and stops it at the end)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

import aiohttp
import httpx

from qeval.engines import Endpoint
from qeval.suites.http import session
from standin import cpu_name, free_port

PROMPT = "The capital of France is " * 16  # about 400 characters, a short custom-suite prompt
COMPLETION = json.dumps({"id": "cmpl-0", "object": "text_completion", "model": "m",
                         "choices": [{"index": 0, "text": " Paris. The capital of Germany is Berlin.",
                                      "logprobs": None, "finish_reason": "length"}],
                         "usage": {"prompt_tokens": 96, "completion_tokens": 12, "total_tokens": 108}}).encode()
CHAT = json.dumps({"id": "chat-0", "object": "chat.completion", "model": "m",
                   "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."},
                                "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 96, "completion_tokens": 12, "total_tokens": 108}}).encode()

HERE = Path(__file__).resolve().parent
SERVER = r"""
import asyncio, sys
from standin import Requests, listen
port, delay = int(sys.argv[1]), float(sys.argv[2])
bodies = {b"/v1/completions": sys.argv[3].encode(), b"/v1/chat/completions": sys.argv[4].encode()}

def answer(path):
    body = bodies.get(path)
    if body is None:
        return b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)) + body

class Http(Requests):
    def request(self, method, path, body):
        asyncio.get_running_loop().call_later(delay, self.reply, answer(path))
    def reply(self, data):
        if not self.t.is_closing():
            self.t.write(data)

async def main():
    await listen(port, Http, reuse_port=True)

asyncio.run(main())
"""


def start_server(port: int, delay: float, procs: int) -> list[subprocess.Popen]:
    out = []
    for _ in range(procs):
        p = subprocess.Popen([sys.executable, "-c", SERVER, str(port), str(delay), COMPLETION.decode(), CHAT.decode()],
                             stdout=subprocess.PIPE, text=True, cwd=HERE)  # `python -c` imports from its cwd
        if p.stdout.readline().strip() != "ready":
            raise RuntimeError("the server did not start")
        out.append(p)
    return out


def request(i: int) -> tuple[str, dict]:
    """Every other request a chat one, as a suite of chat and plain items sends."""
    common = {"model": "m", "max_tokens": 12, "temperature": 0.0, "seed": 0}
    if i % 2:
        return "/chat/completions", {**common, "messages": [{"role": "user", "content": PROMPT}]}
    return "/completions", {**common, "prompt": PROMPT}


Arm = Callable[[str, int, int], Awaitable[None]]


async def bounded(n: int, conc: int, one: Callable[[int], Awaitable[None]]) -> None:
    sem = asyncio.Semaphore(conc)

    async def go(i: int) -> None:
        async with sem:
            await one(i)

    await asyncio.gather(*(go(i) for i in range(n)))


async def httpx_arm(client: "httpx.AsyncClient", n: int, conc: int) -> None:
    async with client:
        async def one(i: int) -> None:
            path, body = request(i)
            r = await client.post(path, json=body)
            r.raise_for_status()
            r.json()

        await bounded(n, conc, one)


async def httpx_custom(base: str, n: int, conc: int) -> None:
    await httpx_arm(httpx.AsyncClient(base_url=base, timeout=300, limits=httpx.Limits(max_connections=conc),
                                      headers={}, verify=False), n, conc)


async def httpx_logprobs(base: str, n: int, conc: int) -> None:
    await httpx_arm(httpx.AsyncClient(base_url=base, timeout=300, headers={}, verify=False), n, conc)


async def httpx_tuned(base: str, n: int, conc: int) -> None:
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc, keepalive_expiry=60)
    await httpx_arm(httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(300, pool=None), limits=limits,
                                      http1=True, http2=False, trust_env=False, verify=False), n, conc)


async def httpx2_tuned(base: str, n: int, conc: int) -> None:
    import httpx2  # pydantic's fork of httpx (huggingface_hub's client), whose pool was reworked

    limits = httpx2.Limits(max_connections=conc, max_keepalive_connections=conc, keepalive_expiry=60)
    await httpx_arm(httpx2.AsyncClient(base_url=base, timeout=httpx2.Timeout(300, pool=None), limits=limits,
                                       trust_env=False, verify=False), n, conc)


async def aiohttp_arm(base: str, n: int, conc: int) -> None:
    async with aiohttp.ClientSession(base_url=base + "/", connector=aiohttp.TCPConnector(limit=conc),
                                     timeout=aiohttp.ClientTimeout(total=300)) as s:
        async def one(i: int) -> None:
            path, body = request(i)
            async with s.post(path.lstrip("/"), json=body) as r:
                r.raise_for_status()
                await r.json()

        await bounded(n, conc, one)


async def qeval_arm(base: str, n: int, conc: int) -> None:
    endpoint = Endpoint(base_url=base, model="m", tokenizer=None, engine="vllm")
    async with session(endpoint, timeout_s=300, concurrency=conc) as client:
        async def one(i: int) -> None:
            path, body = request(i)
            await client.post_json(path, body, what=f"request {i}", retries=2, retry_backoff_s=1.0)

        await bounded(n, conc, one)


ARMS: dict[str, Arm] = {"httpx-custom": httpx_custom, "httpx-logprobs": httpx_logprobs, "httpx-tuned": httpx_tuned,
                        "httpx2-tuned": httpx2_tuned, "aiohttp": aiohttp_arm, "qeval": qeval_arm}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--delay", type=float, default=0.2, help="the server's answer time per request, seconds")
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--server-procs", type=int, default=1)
    args = ap.parse_args()
    port = free_port()
    servers = start_server(port, args.delay, args.server_procs)
    base = f"http://127.0.0.1:{port}/v1"
    n = args.requests
    print(f"{cpu_name()}; {n} requests, server answers in {args.delay * 1000:.0f} ms, "
          f"{args.server_procs} server process(es)\n")
    print("| client | in flight | wall s | floor s | requests/s | floor requests/s | of floor | client CPU ms/request |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    try:
        for conc in args.concurrency:
            floor = n / conc * args.delay
            for name in args.arms:
                cpu0, t0 = time.process_time(), time.perf_counter()
                try:
                    asyncio.run(ARMS[name](base, n, conc))
                except Exception as e:  # noqa: BLE001 - a client that fails is a result too
                    print(f"| {name} | {conc} | failed: {type(e).__name__}: {e} | {floor:.1f} | | | | |", flush=True)
                    continue
                wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
                print(f"| {name} | {conc} | {wall:.1f} | {floor:.1f} | {n / wall:.0f} | {n / floor:.0f} | "
                      f"{floor / wall:.0%} | {cpu / n * 1000:.2f} |", flush=True)
    finally:
        for p in servers:
            p.terminate()
        for p in servers:
            p.wait()


if __name__ == "__main__":
    main()
