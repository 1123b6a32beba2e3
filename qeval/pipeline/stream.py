"""A variant's run where the driver is not: its records and notices become a stream of messages, and the
driver merges them (Merge) into its sink, its reporter and the run's folder.

What runs on a worker node (a Ray task) is `run_variant` itself, with a sink and a reporter that send
everything to the driver as it happens: the driver, the only writer of the campaign's store, merges the
records (content-keyed, INSERT OR IGNORE) as they arrive, so a worker lost mid-variant loses nothing
that was sent, and its retry starts from what the driver holds (`Stored`, shipped with the task).
Nothing here imports Ray: the stream is plain Python, and the executor carries it.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import shutil
import socket
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Union

from ..engines.process import pid_alive
from ..errors import MissingEnvError, QuantizeError
from ..hashing import in_hub_cache
from ..settings import Settings
from ..record.store import Record, ResultsStore
from .leases import Guard, unguarded
from .plan import VariantPlan
from .sink import RecordSink, Stored
from .variant import VariantOutcome, make_checkpoint, run_variant

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
    """The end of a make-only unit (make_stream): what making the checkpoint recorded, or why it failed."""

    facts: dict[str, object]
    error: str | None = None


Message = Union[Log, Stage, Begin, Put, Complete, Files, Done, Made]


class Merge:
    """The stream's driver side: each message a unit of work sends, into the driver's sink (the store's one
    writer), its reporter and the run's folder. Every executor whose units run elsewhere merges through it,
    so what the stream means is written once, beside what sends it."""

    def __init__(self, sink: "RecordSink", reporter: "Reporter", workspace: Path):
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
    """RecordSink on a worker: reads its own keys from what the driver held when the task began plus what
    it has sent since; every write is a message. Whole suites another campaign stored on this node's shared
    store are sent as records too (the driver's own shared store is read by the driver)."""

    def __init__(self, stored: Stored, emit: Callable[[Message], None], shared: Path | None = None):
        self.emit, self.shared = emit, shared
        self.done = {k: set(v) for k, v in stored.done.items()}
        self.complete = set(stored.complete)
        # what this task's looks read: the records the driver held when it began (where shipped) and those
        # sent from here since
        self.sent: dict[tuple[str, str], dict[tuple[str, int], Record]] = {
            k: {(r.item_id, r.sample): r for r in recs} for k, recs in stored.records.items()}

    def done_ids(self, vkey: str, skey: str) -> set[str]:
        return set(self.done.get((vkey, skey), ()))

    def is_complete(self, vkey: str, skey: str) -> bool:
        return (vkey, skey) in self.complete

    def records(self, vkey: str, skey: str) -> list[Record]:
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

    def begin(self, started: object) -> None:
        self.emit(Begin(started))  # type: ignore[arg-type]


class StreamReporter:
    """Reporter on a worker: log lines and the start of each step go to the driver, and at each step's end
    the workspace's logs that changed (a task cut by an interrupt or a lost node sends no Done)."""

    def __init__(self, emit: Callable[[Message], None], workspace: Path | None = None):
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


def on_node(plan: VariantPlan, settings: Settings) -> VariantPlan:
    """The plan as this node runs it: its own settings (cache, engine builds, shared store), and the base
    checkpoint where this node keeps it (base_on_node)."""
    base = base_on_node(plan.suites.base_checkpoint, plan.settings, settings)
    return dataclasses.replace(plan, settings=settings, suites=dataclasses.replace(plan.suites, base_checkpoint=base))


def base_on_node(base: Path, driver: Settings, node: Settings) -> Path:
    """Under the node's own models folder where the driver's was under the driver's; a Hugging Face snapshot at
    the same commit in the node's own hub cache (downloaded there where the hub is reachable); else as it is."""
    if base.is_relative_to(driver.models):
        return node.models / base.relative_to(driver.models)
    if in_hub_cache(base):  # <cache>/models--org--name/snapshots/<commit>
        from ..machine.hub import snapshot

        return snapshot(base.parent.parent.name.removeprefix("models--").replace("--", "/"), base.name)
    return base


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


_END = object()


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


def _streamed(work: Callable[[Callable[[Message], None]], Message], name: str) -> Iterator[Message]:
    """Run `work` in a thread and yield what it emits as it emits it; its return value last. The unit's code
    calls its sink and reporter from deep inside; the thread lets this generator yield meanwhile."""
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


def variant_stream(plan: VariantPlan, stored: Stored, files: dict[str, bytes], settings: Settings | None = None,
                   workspace: Path | None = None, guard: Guard = unguarded, reference=None) -> Iterator[Message]:
    """Run one variant on this node and yield what it produces, as it produces it; the last message is
    Done. `files`: the driver's probe and grid files, so what is done is not redone. The workspace is the
    node's own (a fresh folder under its cache, unless given: node_workspace) and is removed afterwards."""
    settings = settings or Settings.from_env()
    plan = on_node(plan, settings)
    own = workspace is None
    ws = node_workspace(settings, plan.name) if own else workspace
    unpack(files, ws)

    def work(emit: Callable[[Message], None]) -> Message:
        sink = StreamSink(stored, emit, settings.records if settings.share_records else None)
        outcome = run_variant(plan, ws, sink, StreamReporter(emit, ws), guard, reference)
        return Done(outcome, shipped_files(ws))

    try:
        yield from _streamed(work, plan.name)
    finally:
        if own:
            shutil.rmtree(ws, ignore_errors=True)


def make_stream(plan: VariantPlan, settings: Settings | None = None, guard: Guard = unguarded) -> Iterator[Message]:
    """Only make the variant's checkpoint on this node (quantize it into the node's cache, unless it is there):
    a unit of its own where making needs less than serving (one GPU of a tensor-parallel variant's several),
    so the rest are not held idle meanwhile. Its log lines and quantizer log stream as a variant's do; the
    last message is Made. The serving unit that follows on this node finds the checkpoint made."""
    settings = settings or Settings.from_env()
    plan = on_node(plan, settings)
    ws = node_workspace(settings, plan.name)

    def work(emit: Callable[[Message], None]) -> Message:
        reporter = StreamReporter(emit, ws)
        try:
            with guard("shared"):
                _, facts = make_checkpoint(plan, ws, reporter)
        except (QuantizeError, MissingEnvError) as e:
            reporter.log(f"[{plan.name}] NOT EVALUATED: {e}")
            return Made({}, str(e))
        return Made(facts)

    try:
        yield from _streamed(work, plan.name)
    finally:
        shutil.rmtree(ws, ignore_errors=True)
