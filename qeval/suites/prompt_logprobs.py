"""Prompt log-probabilities from a served engine, for the logprobs suites: one request retried on a transient
failure, and many sent at a bounded concurrency over one client."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import httpx

from ..engines import Endpoint
from ..engines.base import tls_verify
from ..engines.capabilities import PromptLogprobsRoute
from ..errors import EngineError


async def fetch_logprobs(client: httpx.AsyncClient, route: PromptLogprobsRoute, url: str, payload: dict[str, Any],
                         what: str, retries: int, retry_backoff_s: float) -> dict:
    """The route's parsed answer to one request; `what` names it in the error once every try failed."""
    last: Exception | None = None
    for _ in range(retries + 1):
        try:
            r = await client.post(url, json=payload)
            r.raise_for_status()
            return route.parse(r.json())
        except (httpx.HTTPError, KeyError, ValueError) as e:
            last = e
            await asyncio.sleep(retry_backoff_s)
    raise EngineError(f"{what} failed after {retries + 1} tries: {last}")


def gather_bounded(endpoint: Endpoint, timeout_s: float, concurrency: int,
                   jobs: list[Callable[[httpx.AsyncClient], Awaitable[None]]]) -> None:
    """Run the jobs on one client to the endpoint, at most `concurrency` at a time; nothing when there are none."""
    if not jobs:
        return

    async def main() -> None:
        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(base_url=endpoint.base_url, timeout=timeout_s, headers=endpoint.headers,
                                     verify=tls_verify(endpoint.base_url)) as client:
            async def one(job: Callable[[httpx.AsyncClient], Awaitable[None]]) -> None:
                async with sem:
                    await job(client)

            await asyncio.gather(*(one(j) for j in jobs))

    asyncio.run(main())
