"""The `ray` executor: each variant is a Ray task on an existing cluster (or one started here), run in parallel.

Placement, node loss and GPU isolation are Ray's; qeval writes no scheduler. Each task asks what its
variant needs (CPUs, `tensor_parallel_size` GPUs on one node or a fraction of one, custom resources),
runs the pipeline's Work on its node with that node's own cache and workspace, and streams its messages
back (stream.py). A variant served on several GPUs whose checkpoint is quantized first makes it in a task of
its own on one GPU, and is then served where it was made (make_task). This driver, the only writer of the
store and run.json, merges each message as it arrives (stream.Merge, as every executor does). A task whose
worker or node is lost is run again (bounded) from what was merged: nothing lost, nothing twice.
No shared filesystem is assumed: probe, grid and log files travel with the stream.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Literal, Sequence

from pydantic import Field

from ..engines.process import INTERRUPT_GRACE_S, is_alive, signals_held
from ..errors import ConfigError, MissingEnvError, QevalError
from .base import Budget, DriverSink, Unit, Work, not_evaluated
from .leases import ADMIT_S
from .outcome import VariantOutcome
from .spec import EXECUTORS, ExecutorSpec
from .stream import Done, Made, Merge, shipped_files, streamed

if TYPE_CHECKING:
    from ..progress import Reporter

TO_DRIVER = ("probe", "grid")  # the driver's files a worker reads to skip what is done (never its logs)
# after a force cancel, how long the driver waits to see each task's stream end (its worker gone)
CANCEL_WAIT_S = INTERRUPT_GRACE_S


class RayExecutorSpec(ExecutorSpec):
    kind: Literal["ray"] = "ray"  # type: ignore[assignment]
    # "auto": the cluster RAY_ADDRESS names, else the one running on this machine; "local": start one here
    # for this run (bound to 127.0.0.1); else the head's "host:port" or a "ray://host:port" client address
    address: str = "auto"
    num_cpus: float = Field(1, gt=0)  # per variant
    # per variant on a GPU engine: a share of one GPU, to pack small models (the engine's
    # gpu_memory_utilization must fit in it); unset: the engine's tensor_parallel_size whole GPUs
    gpu_fraction: float | None = Field(None, gt=0, le=1)
    resources: dict[str, float] = {}  # custom resources (node labels) every variant's task asks for
    # the GPUs a variant's quantization holds where its engine serves on more (tensor_parallel_size): a task of
    # its own (quantizers compute on one GPU); at least the engine's count: made inside its serving task
    quantize_gpus: int = Field(1, ge=1)
    max_retries: int = Field(2, ge=0)  # runs again of a variant whose worker or node was lost
    # while a probe waits for quality work still running on its device, new quality work may start beside it
    # for this long from its request (leases.py); 0: a waiting probe holds back all new quality work
    admit_s: float = Field(ADMIT_S, ge=0)
    object_store_mb: int = Field(128, ge=80)  # `local` only: Ray's object store (records are small)


@dataclass(frozen=True)
class Demand:
    num_cpus: float
    num_gpus: float
    resources: dict[str, float]

    def as_dict(self) -> dict[str, float]:
        return {"CPU": self.num_cpus, **({"GPU": self.num_gpus} if self.num_gpus else {}), **self.resources}


@dataclass(frozen=True)
class Placed:
    node: str  # where the task runs: "<host> node <node id prefix> (<its labels>)"
    node_id: str = ""  # Ray's hex id of that node


def _custom(resource: str) -> bool:
    """A resource a node was given by name (a label such as `gpu_box`), not one Ray counts itself."""
    return resource not in ("CPU", "GPU", "memory", "object_store_memory") and not resource.startswith(
        ("node:", "accelerator_type:"))


def _ray():
    try:
        import ray
    except ImportError:
        raise MissingEnvError("Ray (the `ray` executor)", "this Python", hint="pip install 'qeval[ray]'") from None
    return ray


def reachable(target: str, address: str, timeout_s: float = 10.0) -> None:
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            pass
    except (OSError, ValueError) as e:
        where = address if target == address else f"{address} (RAY_ADDRESS={target})"
        raise QevalError(f"no Ray cluster reachable at {where}: {e}") from None


def _here(ray, gpus: float, needs: str) -> tuple[Placed, list[str], str | None]:
    """Where this task runs; the devices its stages lease (the GPUs Ray gave it, a shared one too when packed,
    else its node's CPUs); and, when it was given whole GPUs, why the count is not what it `needs`."""
    me = ray.get_runtime_context().get_node_id()
    labels = sorted(k for n in ray.nodes() if n["NodeID"] == me for k in n["Resources"] if _custom(k))
    placed = Placed(f"{socket.gethostname()} node {me[:8]}" + (f" ({', '.join(labels)})" if labels else ""), me)
    seen = ray.get_gpu_ids()
    wrong = None
    if gpus >= 1 and len(seen) != int(gpus):  # whole GPUs: the tool must see exactly the ones Ray gave this task
        wrong = f"the task was given {len(seen)} GPU(s) {seen}, {needs} {int(gpus)}"
    return placed, [f"{me}/gpu{g}" for g in seen] or [f"{me}/cpu"], wrong


def variant_task(work: Work, plan: Unit, stored, files: dict[str, bytes], gpus: float, book, holder: str,
                 reference=None, made: dict | None = None, urgent: bool = False) -> Iterator[Any]:
    """The Ray task's body, on its node: where it is, its GPUs checked, then the variant's stream (Work.on_node),
    each stage leased on its devices from the driver's book (`book`, a LeaseBook actor); `urgent`: another unit
    starts after this one, so its probe lets no new quality work in while it waits."""
    ray = _ray()
    placed, keys, wrong = _here(ray, gpus, "the engine needs (tensor_parallel_size)")
    yield placed
    if wrong:
        yield Done(VariantOutcome(name=plan.name, status="error", error=wrong), {})
        return
    # the baseline's records come from the driver's box once its suites are done: waited for at the first suite
    pending = (lambda: ray.get(reference.get.remote())) if reference is not None else None
    guard = _guard(ray, book, keys, holder, urgent)
    yield from streamed(lambda emit: work.on_node(plan, stored, files, emit, guard, pending, made), plan.name)


def make_task(work: Work, plan: Unit, gpus: float, book, holder: str) -> Iterator[Any]:
    """The make-only task's body (Work.make), on a node able to serve the variant after it."""
    ray = _ray()
    placed, keys, wrong = _here(ray, gpus, "its quantizer needs")
    yield placed
    if wrong:
        yield Done(VariantOutcome(name=plan.name, status="error", error=wrong), {})
        return
    guard = _guard(ray, book, keys, holder)
    yield from streamed(lambda emit: work.make(plan, emit, guard), plan.name)


class ReferenceBox:
    """The baseline's records (sink.Reference), set by the driver's sink once the baseline's suites are all
    stored; a variant's task, made and served meanwhile, waits on `get` (an async actor: many wait at once)."""

    def __init__(self):
        import asyncio

        self._ready, self._reference = asyncio.Event(), None

    async def set(self, reference) -> None:
        self._reference = reference
        self._ready.set()

    async def get(self):
        await self._ready.wait()
        return self._reference


def _guard(ray, book, keys: list[str], holder: str, urgent: bool = False):
    from contextlib import contextmanager

    @contextmanager
    def guard(kind):
        ray.get(book.acquire.remote(keys, kind, holder, urgent))
        try:
            yield
        finally:
            ray.get(book.release.remote(keys, kind, holder))

    return guard


def startable(plans: Sequence[Unit], left: set[str], submitted: set[str]) -> list[Unit]:
    """The plans to submit now: not settled, not submitted, and the plan each starts after (Unit.after) settled
    (or not in this run). The rest are submitted as what they wait for settles."""
    names = {p.name for p in plans}
    return [p for p in plans if p.name in left and p.name not in submitted
            and (p.after is None or p.after not in names or p.after not in left)]


def _pump(ray, gen, tag: tuple[str, int], q: queue.Queue) -> None:
    """Move one task's stream into the driver's queue; its end, or how it failed, last."""
    try:
        for ref in gen:
            q.put((tag, ray.get(ref)))
        q.put((tag, None))
    except Exception as e:  # noqa: BLE001 (Ray's errors: a lost worker or node, or the task's own fault)
        q.put((tag, e))


def _cancel(ray, gens: dict[tuple[str, int], Any], q: queue.Queue) -> None:
    """Stop tasks still running (an interrupt, or the campaign gone): each is cancelled by force, which ends its
    worker process; the engines it started end with it (their parent-death signal and guardian). Their streams'
    ends are awaited, bounded, so no task is still running when the driver goes on to write the record."""
    for gen in gens.values():
        try:
            ray.cancel(gen, force=True)
        except Exception:  # noqa: BLE001 (a task that ended meanwhile)
            pass
    waiting, deadline = set(gens), time.monotonic() + CANCEL_WAIT_S
    while waiting and time.monotonic() < deadline:
        try:
            tag, msg = q.get(timeout=0.1)
        except queue.Empty:
            continue
        if msg is None or isinstance(msg, Exception):  # the stream's end (a cancelled task ends in an error)
            waiting.discard(tag)


def _descendants() -> list:
    import psutil

    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def _end(procs: list, within_s: float) -> None:
    """Wait for the processes to exit, at most `within_s`; SIGKILL the ones still running then."""
    import psutil

    deadline = time.monotonic() + within_s
    while (alive := [p for p in procs if is_alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass


def _write_leases(workspace: Path, history: list[dict]) -> None:
    """Every lease of the run, next to its record: the evidence that no probe overlapped other work."""
    import json

    from .leases import overlaps

    path = workspace / "leases.json"
    path.write_text(json.dumps({"leases": history, "overlaps": len(overlaps(history))}, indent=1))


@EXECUTORS.register("ray")  # also the entry point qeval.executors:ray, which finds this module
class RayExecutor:
    """Variants as Ray tasks, all submitted at once; outcomes in the order they finish."""

    Spec = RayExecutorSpec

    def __init__(self, spec: ExecutorSpec | None = None, max_seconds: float | None = None):
        self.spec: RayExecutorSpec = spec if isinstance(spec, RayExecutorSpec) else RayExecutorSpec()
        self.max_seconds = max_seconds
        self._ray, self._own = None, False  # connected by check(), let go after run()
        self._before: set[int] = set()  # this process's descendants before it started a cluster of its own

    # -- what each variant asks -------------------------------------------------------------
    def demand(self, plan: Unit) -> Demand:
        s, e = self.spec, plan.engine
        gpu = getattr(e, "device", "cpu") == "gpu" and not plan.external
        tp = getattr(e, "tensor_parallel_size", 1)
        if gpu and s.gpu_fraction is not None:
            if tp > 1:
                raise ConfigError(f"variant {plan.name}: gpu_fraction packs variants on one GPU; its engine's "
                                  f"tensor_parallel_size is {tp}", where="executor.gpu_fraction")
            util = getattr(e, "gpu_memory_utilization", None)
            if util is None or util > s.gpu_fraction:
                raise ConfigError(f"variant {plan.name}: with gpu_fraction {s.gpu_fraction} its engine's "
                                  f"gpu_memory_utilization must be set, at most {s.gpu_fraction} (it is {util})",
                                  where="engine.gpu_memory_utilization")
        gpus = (s.gpu_fraction or tp) if gpu else 0
        return Demand(s.num_cpus, gpus, dict(s.resources))

    def make_demand(self, plan: Unit, serve: Demand, work: Work) -> Demand | None:
        """What making the variant's checkpoint asks, where it is less than serving it: `quantize_gpus` (one) of
        a tensor-parallel variant's several; None: made in the serving task."""
        if serve.num_gpus <= self.spec.quantize_gpus or not work.made_apart(plan):
            return None
        return Demand(serve.num_cpus, self.spec.quantize_gpus, serve.resources)

    @staticmethod
    def _holders(ray, d: Demand) -> list[str]:
        """The live nodes whose whole resources can hold the demand."""
        need = d.as_dict()
        return [n["NodeID"] for n in ray.nodes()
                if n.get("Alive") and all(n["Resources"].get(k, 0) >= v for k, v in need.items())]

    def _makes(self, ray, plans: Sequence[Unit], demands: dict[str, Demand],
               work: Work) -> dict[str, tuple[Demand, dict]]:
        """Per variant made in a task of its own: its demand and the Ray options that keep it on a node that can
        serve the variant afterwards (a label selector on node ids, where some node could make but not serve)."""
        out = {}
        for p in plans:
            if (md := self.make_demand(p, demands[p.name], work)) is None:
                continue
            serve, make = self._holders(ray, demands[p.name]), self._holders(ray, md)
            opts = {} if set(make) <= set(serve) else {"label_selector": {"ray.io/node-id": f"in({','.join(serve)})"}}
            out[p.name] = (md, opts)
        return out

    def _check_fits(self, ray, demands: dict[str, Demand]) -> None:
        """A variant no node can hold would wait forever: refused before anything is submitted."""
        for name, d in demands.items():
            if not self._holders(ray, d):
                need, nodes = d.as_dict(), [n for n in ray.nodes() if n.get("Alive")]
                have = "; ".join(", ".join(f"{k} {v:g}" for k, v in sorted(n["Resources"].items())
                                           if k in ("CPU", "GPU") or _custom(k)) for n in nodes) or "no live node"
                raise ConfigError(f"variant {name} needs {', '.join(f'{k} {v:g}' for k, v in need.items())} on "
                                  f"one node; no node of the Ray cluster at {self.spec.address} has that "
                                  f"(nodes: {have})", where="executor")

    # -- the cluster --------------------------------------------------------------------------
    def check(self, plans: Sequence[Unit]) -> dict[str, Demand]:
        """Before anything is written: each variant's demand valid, the cluster reached, some node able to hold
        it. Returns the demands."""
        demands = {p.name: self.demand(p) for p in plans}
        try:
            if self._ray is None:
                self._connect()
            self._check_fits(self._ray, demands)
        except BaseException:
            self._let_go()
            raise
        return demands

    def _let_go(self) -> None:
        """Disconnect; a cluster started for this run is shut down, and every process it started (its workers,
        the engines their tasks started) has ended when this returns."""
        ray, self._ray = self._ray, None
        if self._own and ray is not None:
            started = [p for p in _descendants() if p.pid not in self._before]
            ray.shutdown()
            _end(started, INTERRUPT_GRACE_S)

    def _connect(self) -> None:
        """Connect (or start `local`): sets self._ray, and self._own where this run must shut it down.

        ray.init puts a SIGTERM handler of its own (sys.exit(15)) in place of the one the process had, and a
        SIGTERM would then end `qeval run` without its record or its exit code 143: the process's handlers are
        put back after it, and a SIGINT / SIGTERM that came meanwhile reaches them then."""
        ray = _ray()
        if ray.is_initialized():  # a notebook's own connection: used, left as it is
            self._ray, self._own = ray, False
            return
        address = self.spec.address
        target = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
        if target not in ("", "local") and not target.startswith("ray://"):
            reachable(target, address)  # Ray itself retries an absent head for minutes
        self._before = {p.pid for p in _descendants()}
        try:
            with signals_held():
                # set first: a signal held until the block ends finds a cluster to shut down
                self._ray, self._own = ray, True
                try:
                    if address == "local":
                        ray.init(include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                                 object_store_memory=self.spec.object_store_mb << 20, configure_logging=False)
                    else:
                        ray.init(address=address, log_to_driver=False, configure_logging=False)
                except (ConnectionError, RuntimeError, ValueError) as e:
                    raise QevalError(f"no Ray cluster reachable at {address!r}: {str(e).splitlines()[0]}") from None
        except SystemExit as e:  # a SIGTERM that came inside ray.init, after it put its own handler in place
            if e.code != signal.SIGTERM:
                raise
            signal.raise_signal(signal.SIGTERM)  # now to the process's own handler
            raise

    # -- the run ---------------------------------------------------------------------------------
    def run(self, plans: Sequence[Unit], work: Work, workspace: Path, sink: DriverSink,
            reporter: "Reporter") -> Iterator[VariantOutcome]:
        try:
            demands = self.check(plans)
            yield from self._dispatch(self._ray, plans, work, demands, workspace, sink, reporter)
        finally:
            self._let_go()

    def _dispatch(self, ray, plans, work: Work, demands, workspace: Path, sink: DriverSink,
                  reporter) -> Iterator[VariantOutcome]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from .leases import LeaseBook

        task = ray.remote(variant_task)
        makes = self._makes(ray, plans, demands, work)

        # the driver's, on the driver's node: it lives as long as the run, and a worker node lost takes none of it
        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
        book = ray.remote(num_cpus=0)(LeaseBook).options(scheduling_strategy=here).remote(self.spec.admit_s)
        # gates that look while a variant runs pair with the baseline's records: they go through this box
        looks = any(sink.reference_for(p) is not None for p in plans)
        box = ray.remote(num_cpus=0)(ReferenceBox).options(scheduling_strategy=here).remote() if looks else None
        if box is not None:  # the driver's sink says when the baseline's records are stored; the box carries them
            sink.on_reference(lambda reference: box.set.remote(reference))
        try:
            yield from self._follow(ray, task, work, book, box, plans, demands, makes, workspace, sink, reporter)
        finally:
            _write_leases(workspace, ray.get(book.history.remote()))
            ray.kill(book)
            if box is not None:
                ray.kill(box)

    def _follow(self, ray, task, work: Work, book, box, plans, demands, makes, workspace: Path, sink: DriverSink,
                reporter) -> Iterator[VariantOutcome]:
        """Place every unit, try again what lost its worker, and hand each message of their streams to the
        stream's merge (stream.Merge): what is Ray's here is placement, retries and the budget."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        q: queue.Queue = queue.Queue()
        merge = Merge(sink, reporter, workspace)
        budget = Budget(self.max_seconds)
        by_name = {p.name: p for p in plans}
        attempt: dict[str, int] = {}  # tasks submitted per variant (its make task and its serving task count)
        lost: dict[str, int] = {}  # tasks whose worker or node was lost, per variant
        gens: dict[str, Any] = {}
        node: dict[str, Placed] = {}  # where each variant's current task was placed
        made: dict[str, tuple[str, dict]] = {}  # variant -> the node its make task ran on, what making recorded
        make_task_ = ray.remote(make_task)

        def submit(p: Unit) -> None:
            attempt[p.name] = attempt.get(p.name, 0) + 1
            holder = f"{p.name}#{attempt[p.name]}"
            if p.name in makes and p.name not in made:  # its checkpoint first, on quantize_gpus, not all it serves on
                d, opts = makes[p.name]
                gen = make_task_.options(num_returns="streaming", num_cpus=d.num_cpus, num_gpus=d.num_gpus,
                                         resources=d.resources or None, max_retries=0, name=f"qeval:{p.name}:make",
                                         **opts).remote(work, p, d.num_gpus, book, holder)
            else:
                d = demands[p.name]
                # where its checkpoint was made, unless that node is gone or cannot hold it (then made again there)
                where = {"scheduling_strategy": NodeAffinitySchedulingStrategy(made[p.name][0], soft=True)} \
                    if p.name in made else {}
                # Ray's own retries would rerun from a stale snapshot: qeval resubmits with what is merged. A
                # variant whose gates look while it runs waits, at its first suite, for the baseline's records,
                # which the driver's sink puts in the box as soon as the baseline's suites are stored
                looks = box if sink.reference_for(p) is not None else None
                gen = task.options(num_returns="streaming", num_cpus=d.num_cpus, num_gpus=d.num_gpus,
                                   resources=d.resources or None, max_retries=0, name=f"qeval:{p.name}",
                                   **where).remote(
                    work, p, sink.stored(p.name, with_records=looks is not None), shipped_files(workspace, TO_DRIVER),
                    d.num_gpus, book, holder, looks, made[p.name][1] if p.name in made else None,
                    any(q.after == p.name for q in plans))
            gens[p.name] = gen
            threading.Thread(target=_pump, args=(ray, gen, (p.name, attempt[p.name]), q), daemon=True,
                             name=f"qeval-ray-{p.name}").start()

        left = set(by_name)
        try:
            while left:
                for p in startable(plans, left, set(gens)):
                    submit(p)
                # checked at every turn: a busy stream must not hide a spent budget
                yield from self._over_budget(ray, budget, left, node, gens, by_name, attempt, reporter)
                if not left:
                    break
                try:
                    (name, n), msg = q.get(timeout=1.0)
                except queue.Empty:
                    continue
                if name not in left or n != attempt[name]:
                    continue  # what a lost attempt still sent, or a variant already settled
                where = node[name].node if name in node else ""
                if isinstance(msg, Placed):
                    node[name] = msg
                    what = "making its checkpoint" if name in makes and name not in made else "running"
                    again = lost.get(name, 0)
                    reporter.log(f"[{name}] {what} on {msg.node}" + (f" (attempt {again + 1})" if again else ""))
                elif isinstance(msg, Made):  # its checkpoint made: now served where it was made
                    made[name] = (node[name].node_id, msg.facts)
                    node.pop(name, None)  # not started until its serving task is placed
                    submit(by_name[name])
                elif msg is None:  # the stream ended without its Done: cannot happen unless the task is cut
                    left.discard(name)
                    yield not_evaluated(name, "its Ray task ended without an outcome", reporter)
                elif isinstance(msg, ray.exceptions.RayTaskError):  # the task's own fault: a rerun repeats it
                    left.discard(name)
                    yield not_evaluated(name, f"its Ray task failed on {where or 'a worker'}: "
                                              f"{str(msg.cause or msg).splitlines()[0]}", reporter)
                elif isinstance(msg, Exception):  # its worker or node was lost
                    ray.get(book.release_all.remote(f"{name}#{n}"))  # what it held inside a stage
                    why = f"{type(msg).__name__}: {str(msg).splitlines()[0] if str(msg) else ''}"
                    lost[name] = k = lost.get(name, 0) + 1
                    if k <= self.spec.max_retries:
                        reporter.log(f"[{name}] lost its worker on {where or 'a node'} ({why}); run again "
                                     f"({k} of {self.spec.max_retries}), resuming from the merged records")
                        node.pop(name, None)
                        submit(by_name[name])
                    else:
                        left.discard(name)
                        yield not_evaluated(name, f"lost its worker {k} times, the last on {where or 'a node'} ({why})",
                                            reporter)
                elif (out := merge(msg, where)) is not None:  # the unit's last message: its outcome
                    left.discard(name)
                    yield out
        except BaseException:  # Ctrl-C / SIGTERM, or the campaign gone: no task of this run runs on
            _cancel(ray, {(n, attempt[n]): gens[n] for n in left if n in gens}, q)
            raise

    def _over_budget(self, ray, budget: Budget, left, node, gens, by_name, attempt,
                     reporter) -> Iterator[VariantOutcome]:
        """Once the budget is spent, variants not yet placed on a node are not started (as the local executor)."""
        if not budget.spent():
            return
        for name in sorted(left - set(node)):
            if by_name[name].role == "baseline":
                continue
            if name in gens:
                ray.cancel(gens[name], force=True)
            left.discard(name)
            attempt[name] = -1
            yield budget.skipped(name, reporter)
