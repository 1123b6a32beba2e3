"""Running a coroutine to its end from synchronous code, as the suites and the probe do."""

from __future__ import annotations

import asyncio
from typing import Any, Coroutine, TypeVar

T = TypeVar("T")


def _quiet_when_interrupted(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # A signal turned into an exception (Ctrl-C, or qeval's SIGTERM handler) is raised inside whichever task was
    # running; asyncio stores it on that task and also lets it out of the loop, where it unwinds the program as
    # it should. The task's copy is never read, so asyncio would log "Task exception was never retrieved" with a
    # second traceback of the same interruption after the clean message: that one report is dropped, any other
    # goes to asyncio's default handler.
    exc = context.get("exception")
    if isinstance(exc, BaseException) and not isinstance(exc, Exception):
        return
    loop.default_exception_handler(context)


def run(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, without the duplicate report of an interruption."""
    with asyncio.Runner() as runner:
        runner.get_loop().set_exception_handler(_quiet_when_interrupted)
        return runner.run(coro)
