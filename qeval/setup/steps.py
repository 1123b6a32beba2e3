"""Setup's independent steps at once: each tool env is its own venv, so the vLLM env and the llm-compressor env
build side by side, an overlay once the env it sits on is built, the embedded model once the env that converts it
is. Most of a build is pip unpacking wheels and an interpreter importing them, so on a machine of several cores
the whole takes about as long as its longest chain instead of the sum.

Hand-written over concurrent.futures: the steps are a handful with one or two edges, a scheduler library would
be a dependency for twenty lines."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Step:
    name: str
    run: Callable[[], Any]
    after: tuple[str, ...] = ()  # the steps it needs done first


def run_steps(steps: list[Step], workers: int) -> dict[str, Any]:
    """Each step's result by name, every step started as soon as the ones it needs are done, at most `workers` at
    a time (1: one after another, in the order given). A step that fails lets those already running finish,
    starts no other, and its error is raised (the first one, where several fail)."""
    names = {s.name for s in steps}
    for s in steps:
        unknown = set(s.after) - names
        if unknown:
            raise ValueError(f"step {s.name} waits for unknown steps {sorted(unknown)}")
    done: dict[str, Any] = {}
    waiting = list(steps)
    running: dict[Future, Step] = {}
    error: BaseException | None = None
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="qeval-setup") as pool:
        while waiting or running:
            if error is None:
                ready = [s for s in waiting if all(a in done for a in s.after)]
                for s in ready[:max(0, workers - len(running))]:
                    waiting.remove(s)
                    running[pool.submit(s.run)] = s
            if not running:
                if error is None and waiting:
                    raise ValueError(f"steps wait on each other: {sorted(s.name for s in waiting)}")
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                s = running.pop(f)
                try:
                    done[s.name] = f.result()
                except BaseException as e:  # noqa: BLE001 - re-raised below, after the running steps end
                    error = error or e
    if error is not None:
        raise error
    return done
