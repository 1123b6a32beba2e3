"""An asyncio streaming client: one process drives the engine, timing every token as it arrives.

It streams through the suites' aiohttp client (`qeval.suites.http.connect`), not httpx: at hundreds of requests
in flight httpx's pool spends milliseconds of this process's CPU on every request, and the probe's figures at
saturation would then be the client's, not the engine's (docs/evidence/eval-throughput.md).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass, field

import aiohttp

from ..suites.http import Client, connect, describe


@dataclass
class RequestResult:
    ok: bool
    start: float  # perf_counter at send
    ttft: float | None = None  # seconds to the first token
    e2e: float | None = None  # seconds to the last byte
    last_token: float | None = None  # seconds to the last token's chunk (the usage chunk and [DONE] follow it)
    itls: list[float] = field(default_factory=list)  # gaps between token chunks
    output_tokens: int = 0
    prompt_tokens: int = 0
    error: str | None = None

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first, first to last token, as vLLM's benchmark defines it."""
        end = self.last_token if self.last_token is not None else self.e2e
        if self.ttft is None or end is None or self.output_tokens < 2:
            return None
        return (end - self.ttft) / (self.output_tokens - 1)


def random_prompt(rng: random.Random, length: int, vocab: int) -> list[int]:
    # token ids away from the special-token ends of the vocabulary, as vLLM's random dataset does
    return [rng.randrange(100, max(101, vocab - 100)) for _ in range(length)]


async def stream_one(client: Client, model: str, prompt: list[int] | str, max_tokens: int,
                     ignore_eos: bool = True) -> RequestResult:
    """One streamed greedy completion. `ignore_eos` fixes the output length; without it the request
    stops where a suite's would (to replay a suite's own requests)."""
    payload = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
               "ignore_eos": ignore_eos, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    res = RequestResult(ok=False, start=t0)
    last = None
    chunks = 0
    try:
        async with client.request("/completions", payload) as r:
            if r.status != 200:
                res.error = f"HTTP {r.status}: {(await r.read())[:200]!r}"
                return res
            # the body as the network delivers it, cut into lines here: one wait per read rather than one per
            # line (an event is its data line and a blank one), the most of this client's CPU per token
            rest, done = b"", False
            while not done:
                read = await r.content.readany()
                if not read:  # the body's end: a last line left unended is a line all the same
                    if not rest:
                        break
                    read = b"\n"
                *lines, rest = (rest + read).split(b"\n")
                for line in lines:
                    if not line.startswith(b"data:"):
                        continue
                    event = line[5:].strip()
                    if event == b"[DONE]":
                        done = True
                        break
                    chunk = json.loads(event.decode())  # str: no sniffing of the bytes' encoding
                    now = time.perf_counter()
                    # every chunk with a choice is a token, even with empty text (vLLM sends one while its
                    # detokenizer holds back a partial UTF-8 character); the usage chunk has none
                    if chunk.get("choices"):
                        chunks += 1
                        if last is None:
                            res.ttft = now - t0
                        else:
                            res.itls.append(now - last)
                        last = now
                    usage = chunk.get("usage")
                    if usage:
                        res.output_tokens = usage.get("completion_tokens", 0)
                        res.prompt_tokens = usage.get("prompt_tokens", 0)
            res.e2e = time.perf_counter() - t0
            await _drain(r)
        res.last_token = None if last is None else last - t0
        # TGI streams no usage; it sends one chunk per token, so the chunks count the tokens
        res.output_tokens = res.output_tokens or chunks
        res.ok = res.ttft is not None
        if not res.ok:
            res.error = "no token streamed"
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
        res.error = describe(e)[:300]
    return res


# how long the bytes after [DONE] may take: an engine ends its body with them at once; a server that holds the
# stream open past [DONE] loses the connection instead of holding the request
DRAIN_S = 1.0


async def _drain(r: aiohttp.ClientResponse) -> None:
    """The bytes after [DONE] (the end of the chunked body), read so the connection goes back to the pool:
    one left unread is closed, and the next request would open another. Untimed, and a failure here loses
    only the connection."""
    try:
        async with asyncio.timeout(DRAIN_S):
            while await r.content.readany():
                pass
    except (aiohttp.ClientError, asyncio.TimeoutError):
        pass


@dataclass
class StepRun:
    results: list[RequestResult]
    wall: float  # seconds from the first send to the last completion
    client_cpu: float  # seconds of this process's CPU in the step


async def run_concurrency(base_url: str, model: str, prompts: list, max_tokens: int, concurrency: int,
                          max_seconds: float, timeout_s: float = 600, headers: dict | None = None,
                          ignore_eos: bool = True) -> StepRun:
    """Keep `concurrency` requests in flight until the prompts run out or time is up."""
    queue: asyncio.Queue = asyncio.Queue()
    for p in prompts:
        queue.put_nowait(p)
    results: list[RequestResult] = []
    async with connect(base_url, headers, timeout_s, max(1, concurrency)) as client:
        cpu0, t0 = time.process_time(), time.perf_counter()
        deadline = t0 + max_seconds

        async def worker() -> None:
            while not queue.empty() and time.perf_counter() < deadline:
                prompt = queue.get_nowait()
                results.append(await stream_one(client, model, prompt, max_tokens, ignore_eos))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
        return StepRun(results=results, wall=wall, client_cpu=time.process_time() - cpu0)


async def run_rate(base_url: str, model: str, prompts: list, max_tokens: int, rate: float, seed: int,
                   max_seconds: float, timeout_s: float = 600, headers: dict | None = None) -> StepRun:
    """Poisson arrivals at `rate` requests per second (exponential gaps, seeded)."""
    rng = random.Random(seed)
    async with connect(base_url, headers, timeout_s, 0) as client:  # 0: a connection for every arrival
        cpu0, t0 = time.process_time(), time.perf_counter()
        tasks = []
        for p in prompts:
            if time.perf_counter() - t0 > max_seconds:
                break
            tasks.append(asyncio.create_task(stream_one(client, model, p, max_tokens)))
            await asyncio.sleep(rng.expovariate(rate))
        results = list(await asyncio.gather(*tasks))
        return StepRun(results=results, wall=time.perf_counter() - t0, client_cpu=time.process_time() - cpu0)
