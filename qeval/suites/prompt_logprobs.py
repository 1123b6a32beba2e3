"""Prompt log-probabilities from a served engine, for the logprobs suites: one request retried on a transient
failure, and many sent at a bounded concurrency over one client."""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from .. import aio
from ..engines import Endpoint
from ..engines.capabilities import PromptLogprobsRoute
from .http import Client, session


async def fetch_logprobs(client: Client, route: PromptLogprobsRoute, url: str, payload: dict[str, Any],
                         what: str, retries: int, retry_backoff_s: float) -> dict:
    """The route's parsed answer to one request; `what` names it in the error once every try failed."""
    return await client.post_json(url, payload, what=what, retries=retries, retry_backoff_s=retry_backoff_s,
                                  parse=route.parse)


def gather_bounded(endpoint: Endpoint, timeout_s: float, concurrency: int,
                   jobs: list[Callable[[Client], Awaitable[None]]]) -> None:
    """Run the jobs on one client to the endpoint, at most `concurrency` at a time; nothing when there are none."""
    if not jobs:
        return

    async def main() -> None:
        sem = asyncio.Semaphore(concurrency)
        async with session(endpoint, timeout_s, concurrency) as client:
            async def one(job: Callable[[Client], Awaitable[None]]) -> None:
                async with sem:
                    await job(client)

            await asyncio.gather(*(one(j) for j in jobs))

    aio.run(main())
