"""How a campaign shows what it is doing: plain lines for logs, rich progress bars on a terminal."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Protocol


class Reporter(Protocol):
    def log(self, message: str) -> None: ...

    def step(self, description: str, total: int | None = None) -> "contextmanager[Callable[[int], None]]": ...


class PlainReporter:
    """One line per event; the library default, and what CI logs get."""

    def __init__(self, emit: Callable[[str], None] = print):
        self.emit = emit

    def log(self, message: str) -> None:
        self.emit(message)

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        t0 = time.monotonic()
        self.emit(f"{description} ...")
        yield lambda n=1: None
        self.emit(f"{description}: done in {time.monotonic() - t0:.0f} s")


class RichReporter:
    """A live bar (items) or spinner (engine start, quantization, lm-eval) with elapsed time."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=False)
        self._lock = threading.Lock()
        self._open = 0  # steps under way: the display runs from the first one's start to the last one's end

    def log(self, message: str) -> None:
        self.console.print(message, highlight=False, markup=False)

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        # steps may run side by side on threads (setup's envs): one shared display, not one per step
        with self._lock:
            if self._open == 0:
                self.progress.start()
            self._open += 1
        try:
            task = self.progress.add_task(description, total=total)
            yield lambda n=1: self.progress.advance(task, n)
            self.progress.update(task, completed=total if total is not None else 1, total=total or 1)
        finally:
            with self._lock:
                self._open -= 1
                if self._open == 0:
                    self.progress.stop()
