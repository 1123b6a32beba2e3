"""A variant's run as a stream of messages, and the driver's side that merges them (Merge) into its sink, its
reporter and the run's folder. Every executor's units speak it, wherever they run.

The worker side is a sink and a reporter that turn every write into a message (StreamSink, StreamReporter):
the unit's code (the pipeline's `run_variant`, handed to the executor as its Work) runs with them and knows
nothing of where it is. The driver, the only writer of the campaign's store, merges the records
(content-keyed, INSERT OR IGNORE) as they arrive, so a worker lost mid-variant loses nothing that was sent,
and its retry starts from what the driver holds (`Stored`, shipped with the task). Nothing here imports Ray
or the pipeline: the stream is plain Python, and an executor only carries it.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol, Union

from ..engines.process import pid_alive
from ..settings import Settings
from ..record.store import Record, ResultsStore
from .outcome import VariantOutcome

if TYPE_CHECKING:
    from ..progress import Reporter

# what a worker sends back besides records: the variant's files the driver keeps in its run folder
SHIPPED = ("probe", "grid", "logs")
MAX_SHIPPED_BYTES = 64 << 20  # per file: an engine log past this is cut to its tail


@dataclass(frozen=True)
class Log:
    text: str


@dataclass(frozen=True)
class Stage:
    text: str  # a step began: "[variant] latency probe ..."


@dataclass(frozen=True)
class Begin:
    started: VariantOutcome


@dataclass(frozen=True)
class Put:
    vkey: str
    skey: str
    variant: str
    suite: str
    records: tuple[Record, ...]


@dataclass(frozen=True)
class Complete:
    vkey: str
    skey: str
    n_items: int


@dataclass(frozen=True)
class Done:
    outcome: VariantOutcome
    files: dict[str, bytes]  # relative to the workspace: the probe, grid rows, logs


@dataclass(frozen=True)
class Files:
    files: dict[str, bytes]  # logs as they stand at the end of a step: a task cut later leaves them with the driver


@dataclass(frozen=True)
class Made:
    """The end of a make-only unit (Work.make) that made the checkpoint: what making it recorded. (One that
    could not make it ends with Done, its outcome the error.)"""

    facts: dict[str, object]


@dataclass(frozen=True)
class Stored:
    """What the driver's store holds of one variant: per (variant key, suite key), the item ids, and the
    keys whose suite is complete. A unit of work that runs elsewhere resumes from it."""

    done: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict)
    complete: frozenset[tuple[str, str]] = frozenset()
    # the records themselves, for a variant whose run gates as it goes (sequential gates read scores)
    records: dict[tuple[str, str], tuple[Record, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, store: ResultsStore, variant: str, with_records: bool = False) -> "Stored":
        done, complete = store.progress(variant)
        records = {k: tuple(store.records(*k)) for k in done} if with_records else {}
        return cls({k: frozenset(v) for k, v in done.items()}, frozenset(complete), records)


class Reads(Protocol):
    """What a unit of work reads of its own keys in the driver's sink."""

    def done_ids(self, vkey: str, skey: str) -> set[str]: ...

    def is_complete(self, vkey: str, skey: str) -> bool: ...

    def records(self, vkey: str, skey: str) -> list[Record]: ...


class Receiver(Protocol):
    """What Merge writes into: the driver's sink."""

    def begin(self, started: VariantOutcome) -> None: ...

    def put(self, vkey: str, skey: str, variant: str, suite: str, records: Iterable[Record]) -> None: ...

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None: ...


Message = Union[Log, Stage, Begin, Put, Complete, Files, Done, Made]
Emit = Callable[[Message], None]  # how a unit sends a message: into a thread's queue, or to Merge itself


class Merge:
    """The stream's driver side: each message a unit of work sends, into the driver's sink (the store's one
    writer), its reporter and the run's folder. Every executor merges through it, wherever its units run, so
    what the stream means is written once, beside what sends it. (Made is the executor's: where a checkpoint
    was made is where its variant is placed next.)"""

    def __init__(self, sink: Receiver, reporter: "Reporter", workspace: Path):
        self.sink, self.reporter, self.workspace = sink, reporter, workspace

    def __call__(self, msg: Message, where: str = "") -> VariantOutcome | None:
        """Merge one message; the outcome where it is the unit's last (Done). `where`: the node it runs on."""
        if isinstance(msg, Log):
            self.reporter.log(msg.text)
        elif isinstance(msg, Stage):
            self.reporter.log(f"{msg.text} ... [{where}]" if where else f"{msg.text} ...")
        elif isinstance(msg, Begin):
            self.sink.begin(msg.started)
        elif isinstance(msg, Put):
            self.sink.put(msg.vkey, msg.skey, msg.variant, msg.suite, msg.records)
        elif isinstance(msg, Complete):
            self.sink.mark_complete(msg.vkey, msg.skey, msg.n_items)
        elif isinstance(msg, Files):
            unpack(msg.files, self.workspace)
        elif isinstance(msg, Done):
            unpack(msg.files, self.workspace)
            return msg.outcome
        else:
            raise TypeError(f"not a message of a variant's stream: {type(msg).__name__}")
        return None


class StreamSink:
    """The sink a unit of work writes (the pipeline's RecordSink), on the worker's side of the stream: every
    write is a message. It reads its own keys from `held`: what the driver held when the task began (Stored)
    plus what it has sent since; or, where the unit runs in the driver's process, the driver's sink itself,
    which has merged each message before the next is made. Whole suites another campaign stored in this
    machine's shared store (`shared`) are sent as records too."""

    def __init__(self, held: "Stored | Reads", emit: Emit, shared: Path | None = None):
        self.emit, self.shared = emit, shared
        self.live = None if isinstance(held, Stored) else held
        stored = held if isinstance(held, Stored) else Stored()
        self.done = {k: set(v) for k, v in stored.done.items()}
        self.complete = set(stored.complete)
        # what this task's looks read: the records the driver held when it began (where shipped) and those
        # sent from here since
        self.sent: dict[tuple[str, str], dict[tuple[str, int], Record]] = {
            k: {(r.item_id, r.sample): r for r in recs} for k, recs in stored.records.items()}

    def done_ids(self, vkey: str, skey: str) -> set[str]:
        if self.live is not None:
            return self.live.done_ids(vkey, skey)
        return set(self.done.get((vkey, skey), ()))

    def is_complete(self, vkey: str, skey: str) -> bool:
        if self.live is not None:
            return self.live.is_complete(vkey, skey)
        return (vkey, skey) in self.complete

    def records(self, vkey: str, skey: str) -> list[Record]:
        if self.live is not None:
            return self.live.records(vkey, skey)
        return sorted(self.sent.get((vkey, skey), {}).values(), key=lambda r: (r.item_id, r.sample))

    def reuse(self, vkey: str, skey: str, variant: str, suite: str) -> int:
        if self.shared is None or not self.shared.exists():
            return 0
        with ResultsStore(self.shared) as shared:
            if not shared.is_complete(vkey, skey):
                return 0
            records = shared.records(vkey, skey)
            n_items = shared.n_items(vkey, skey)
        self.put(vkey, skey, variant, suite, records)
        self.mark_complete(vkey, skey, n_items)
        return len(records)

    def put(self, vkey: str, skey: str, variant: str, suite: str, records: Iterable[Record]) -> None:
        recs = tuple(records)
        self.done.setdefault((vkey, skey), set()).update(r.item_id for r in recs)
        self.sent.setdefault((vkey, skey), {}).update({(r.item_id, r.sample): r for r in recs})
        self.emit(Put(vkey, skey, variant, suite, recs))

    def mark_complete(self, vkey: str, skey: str, n_items: int) -> None:
        self.complete.add((vkey, skey))
        self.emit(Complete(vkey, skey, n_items))

    def begin(self, started: VariantOutcome) -> None:
        self.emit(Begin(started))


class StreamReporter:
    """Reporter on a worker: log lines and the start of each step go to the driver, and at each step's end
    the workspace's logs that changed (a task cut by an interrupt or a lost node sends no Done)."""

    def __init__(self, emit: Emit, workspace: Path | None = None):
        self.emit, self.workspace = emit, workspace
        self._sent: dict[str, int] = {}  # log -> its size when last sent (shipped_files keeps it)

    def _ship_logs(self) -> None:
        if self.workspace is None:
            return
        new = shipped_files(self.workspace, ("logs",), sent=self._sent)  # a log not grown is not read again
        if new:
            self.emit(Files(new))

    def log(self, message: str) -> None:
        self.emit(Log(message))

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Callable[[int], None]]:
        t0 = time.monotonic()
        self.emit(Stage(description))
        try:
            yield lambda n=1: None
        finally:  # a step that failed has the log that says why
            self._ship_logs()
        self.emit(Log(f"{description}: done in {time.monotonic() - t0:.0f} s"))


def shipped_files(workspace: Path, tops: tuple[str, ...] = SHIPPED,
                  sent: dict[str, int] | None = None) -> dict[str, bytes]:
    """The files under `tops` of a workspace, to write into another (logs cut to their last MAX_SHIPPED_BYTES).
    `sent`: each file's size when last sent, by relative path: a file still of that size is left out, and the
    sizes of what is returned are written into it."""
    out: dict[str, bytes] = {}
    for top in tops:
        for p in sorted((workspace / top).rglob("*")):
            if p.is_file():
                size, rel = p.stat().st_size, str(p.relative_to(workspace))
                if sent is not None and sent.get(rel) == size:
                    continue
                with p.open("rb") as f:
                    f.seek(max(0, size - MAX_SHIPPED_BYTES))
                    out[rel] = f.read()
                    if sent is not None:
                        sent[rel] = f.tell()  # where this read ended: what a log grows by later is new
    return out


def unpack(files: dict[str, bytes], workspace: Path) -> None:
    """Write shipped files under `workspace`, each atomically (a reader never sees half a probe)."""
    for rel, data in files.items():
        dst = workspace / rel
        if not dst.resolve().is_relative_to(workspace.resolve()):
            raise ValueError(f"a shipped file points outside the workspace: {rel}")
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(dst.name + ".part")
        tmp.write_bytes(data)
        tmp.replace(dst)


def node_workspace(settings: Settings, name: str) -> Path:
    """A fresh folder for one task under the node's cache, named by its host and process. A task killed with
    its worker (a node lost, a driver gone, a cancel) never reaches its clean-up: such folders of this host
    whose process is gone are removed here, at the next task's start, so a long-lived cluster does not fill."""
    root, host = settings.cache / "work", socket.gethostname()
    root.mkdir(parents=True, exist_ok=True)
    for stale in root.glob(f"*@{host}.pid*"):  # another host's folders (a shared cache) are its own to sweep
        pid = stale.name.rsplit(".pid", 1)[1].split("-", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{name}@{host}.pid{os.getpid()}-", dir=root))




_END = object()


def streamed(work: Callable[[Emit], Message], name: str) -> Iterator[Message]:
    """Run `work` (a unit that sends each message through the function it is given and returns its last) in
    a thread, and yield what it sends as it sends it; its last message last: how a unit becomes the generator
    a remote task streams back. The unit's code calls its sink and reporter from deep inside; the thread lets
    this generator yield meanwhile."""
    q: queue.Queue = queue.Queue()
    result: dict[str, object] = {}

    def run() -> None:
        try:
            result["last"] = work(q.put)
        except BaseException as e:  # an unexpected fault travels to the driver as the task's error
            result["error"] = e
        finally:
            q.put(_END)

    t = threading.Thread(target=run, name=f"qeval-{name}", daemon=True)
    t.start()
    while (msg := q.get()) is not _END:
        yield msg
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    yield result["last"]  # type: ignore[misc]
