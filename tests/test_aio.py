"""qeval.aio.run: a coroutine's result as asyncio.run gives it, and an interruption raised inside a task unwinds
the program once, without asyncio's second report of it ("Task exception was never retrieved")."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from qeval import aio


class Stop(KeyboardInterrupt):
    pass


async def _gathered(raise_in: int) -> None:
    async def one(i: int) -> None:
        await asyncio.sleep(0.01 * i)
        if i == raise_in:
            raise Stop()  # as a signal handler raises inside whichever task is running
        await asyncio.sleep(1)

    await asyncio.gather(*(one(i) for i in range(4)))


def _asyncio_errors(caplog, runner) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="asyncio"), pytest.raises(Stop):
        runner(_gathered(2))
    gc.collect()
    return [r.getMessage() for r in caplog.records if r.name == "asyncio"]


def test_result_is_the_coroutines():
    async def f() -> int:
        await asyncio.sleep(0)
        return 7

    assert aio.run(f()) == 7


def test_an_interruption_in_a_task_is_reported_once(caplog):
    # asyncio.run's own way logs the duplicate: the check sees the thing it removes
    assert any("never retrieved" in m for m in _asyncio_errors(caplog, asyncio.run))
    assert not any("never retrieved" in m for m in _asyncio_errors(caplog, aio.run))


def test_other_task_errors_still_reach_asyncios_handler(caplog):
    async def main() -> None:
        async def bad() -> None:
            raise ValueError("lost")

        t = asyncio.get_running_loop().create_task(bad())
        await asyncio.sleep(0.01)
        del t

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        aio.run(main())
        gc.collect()
    assert any("never retrieved" in r.getMessage() for r in caplog.records)
