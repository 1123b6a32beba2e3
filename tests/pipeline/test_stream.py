"""What a variant run elsewhere sends, without Ray: its message stream, replayed into a store, is the local
run's store; a stream cut part way and run again from what was merged ends the same. The lease book
(executors/leases.py): a probe never overlaps other work on its device, a waiting probe goes before new work."""

from __future__ import annotations

import asyncio
import pickle
import time

import pytest

from qeval.config import load_config
from qeval.executors.leases import LeaseBook, overlaps
from qeval.executors.local import LocalExecutor
from qeval.executors.stream import Begin, Complete, Done, Put, Stored, streamed
from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import plan
from qeval.pipeline.sink import StoreSink
from qeval.pipeline.worker import WORK
from qeval.progress import PlainReporter
from qeval.settings import Settings
from qeval.record.store import ResultsStore
from tests.pipeline.test_pipeline_fake import N, _campaign

QUIET = PlainReporter(lambda s: None)


def _plans(tmp_path):
    config = _campaign(tmp_path)
    cfg, settings = load_config(config), Settings(cache=tmp_path / "cache", share_records=False)
    return Campaign(cfg, settings, config_file=str(config)).plans(plan(cfg, settings, str(config))), settings


def variant_stream(p, stored: Stored, files: dict, settings: Settings):
    """The variant's unit on a node, as a remote executor's task streams it."""
    return streamed(lambda emit: WORK.on_node(p, stored, files, emit, settings=settings), p.name)


def _rows(store: ResultsStore) -> list[tuple]:
    return sorted(store._db.execute("SELECT variant_key, suite_key, item_id, sample, variant, response, scores "
                                    "FROM records"))


def _replay(msgs, store: ResultsStore) -> Done | None:
    done = None
    for m in msgs:
        m = pickle.loads(pickle.dumps(m))  # as it crosses to the driver
        if isinstance(m, Put):
            store.put(m.vkey, m.skey, m.variant, m.suite, m.records)
        elif isinstance(m, Complete):
            store.mark_complete(m.vkey, m.skey, m.n_items)
        elif isinstance(m, Done):
            done = m
    return done


def test_the_stream_replayed_is_the_local_store_and_a_cut_stream_resumes(tmp_path):
    plans, settings = _plans(tmp_path)
    with ResultsStore(tmp_path / "local.sqlite") as local, StoreSink(local) as sink:
        outs = list(LocalExecutor().run(plans, WORK, tmp_path / "ws-local", sink, QUIET))
    with ResultsStore(tmp_path / "remote.sqlite") as remote:
        for p in plans:
            msgs = list(variant_stream(p, Stored(), {}, settings=settings))
            assert isinstance(msgs[-1], Done) and sum(isinstance(m, Begin) for m in msgs) == 1
            _replay(msgs, remote)
        with ResultsStore(tmp_path / "local.sqlite") as local:
            assert _rows(remote) == _rows(local)
    done = msgs[-1]
    assert done.outcome.key == outs[-1].key and done.outcome.probe_path in done.files
    assert any(name.startswith("logs/engine-") for name in done.files)

    # cut after the first half of the first suite's records arrived; run again from what was merged
    with ResultsStore(tmp_path / "cut.sqlite") as cut:
        stream = variant_stream(plans[1], Stored(), {}, settings)
        got = 0
        for m in stream:
            if isinstance(m, Put):
                cut.put(m.vkey, m.skey, m.variant, m.suite, m.records)
                got += len(m.records)
                if got >= N // 2:
                    break
        stream.close()  # the stream's end, as the driver sees a lost worker's
        stored = Stored.of(cut, "w3")
        assert sum(len(v) for v in stored.done.values()) == got and not stored.complete
        again = list(variant_stream(plans[1], stored, {}, settings=settings))
        sent = sum(len(m.records) for m in again if isinstance(m, Put))
        assert sent == 2 * N - got  # only what was missing was asked for again
        _replay(again, cut)
        with ResultsStore(tmp_path / "local.sqlite") as local:
            assert [r for r in _rows(cut)] == [r for r in _rows(local) if r[4] == "w3"]


@pytest.mark.parametrize("admit_s, first", [(0, ["a", "b", "probe", "late"]), (60, ["a", "b", "late", "probe"])])
def test_a_probe_never_overlaps_other_work_and_goes_before_new_work(admit_s, first):
    """admit_s 0: "late" came while the probe waited, and waited behind it; within the probe's window it starts
    beside the quality work the probe waits for anyway, and the probe measures once it is done too."""
    async def scenario():
        book, log = LeaseBook(admit_s=admit_s), []

        async def work(holder, kind, start_after, hold):
            await asyncio.sleep(start_after)
            await book.acquire(["n/cpu"], kind, holder)
            log.append((holder, "in", time.monotonic()))
            await asyncio.sleep(hold)
            await book.release(["n/cpu"], kind, holder)

        await asyncio.gather(work("a", "shared", 0, 0.2), work("b", "shared", 0, 0.2),
                             work("probe", "exclusive", 0.05, 0.1), work("late", "shared", 0.1, 0.05))
        return await book.history(), [h for h, _, _ in log]

    history, order = asyncio.run(scenario())
    assert order == first
    assert overlaps(history) == [] and all(h["end"] for h in history)
    shared = [h for h in history if h["holder"] in "ab"]
    assert shared[0]["start"] < shared[1]["end"] and shared[1]["start"] < shared[0]["end"]  # shared side by side
    # a lease history where a probe did overlap other work is caught
    bad = [{"holder": "x", "kind": "exclusive", "keys": ["n/cpu"], "start": 0, "end": 2},
           {"holder": "y", "kind": "shared", "keys": ["n/cpu"], "start": 1, "end": 3},
           {"holder": "z", "kind": "shared", "keys": ["m/cpu"], "start": 1, "end": 3}]
    assert overlaps(bad) == [(bad[0], bad[1])]


def test_a_lost_holders_leases_are_given_back():
    async def scenario():
        book = LeaseBook()
        await book.acquire(["n/gpu0"], "shared", "lost#1")
        await book.release_all("lost#1")
        await asyncio.wait_for(book.acquire(["n/gpu0"], "exclusive", "probe#1"), timeout=1)
        return await book.history()

    history = asyncio.run(scenario())
    assert [h["holder"] for h in history] == ["lost#1", "probe#1"] and history[0]["end"] is not None


def test_a_snapshot_with_records_lets_a_retry_look_at_what_an_earlier_attempt_sent(tmp_path):
    """Sequential gates read scores: a variant's task resubmitted after a lost worker gets the merged records."""
    from qeval.executors.stream import StreamSink
    from qeval.record.store import Record

    with ResultsStore(tmp_path / "s.sqlite") as store:
        store.put("v", "s", "w3", "custom/x", [Record(item_id=f"i{k}", scores={"c": float(k % 2)}) for k in range(4)])
        plain, full = Stored.of(store, "w3"), Stored.of(store, "w3", with_records=True)
    assert plain.records == {} and StreamSink(plain, lambda m: None).records("v", "s") == []
    sink = StreamSink(full, lambda m: None)
    sink.put("v", "s", "w3", "custom/x", [Record(item_id="i9", scores={"c": 1.0})])
    assert [r.item_id for r in sink.records("v", "s")] == ["i0", "i1", "i2", "i3", "i9"]
    assert sink.records("v", "s")[1].scores == {"c": 1.0}


def test_logs_reach_the_driver_at_each_step_so_a_cut_task_keeps_them(tmp_path):
    """A task cut part way sends no Done: the logs of the steps it finished came before, each step's changed
    logs once (the engine's log of the start, again once the suites have added to it)."""
    from qeval.executors.stream import Files, Stage

    plans, settings = _plans(tmp_path)
    msgs = []
    stream = variant_stream(plans[1], Stored(), {}, settings)
    for m in stream:
        msgs.append(m)
        if isinstance(m, Stage) and "suite" not in m.text and len([x for x in msgs if isinstance(x, Stage)]) > 2:
            break  # cut: the generator is closed here, as a lost worker's stream ends
    stream.close()
    assert not any(isinstance(m, Done) for m in msgs)
    shipped = [m for m in msgs if isinstance(m, Files)]
    assert shipped, [type(m).__name__ for m in msgs]
    names = {rel for f in shipped for rel in f.files}
    assert any(rel.startswith("logs/") and "engine" in rel for rel in names), names
    for f in shipped:  # as they cross to the driver
        assert pickle.loads(pickle.dumps(f)) == f
    sizes = [(rel, len(data)) for f in shipped for rel, data in f.files.items()]
    assert len(sizes) == len(set(sizes))  # a log is sent again only when it has grown


def test_a_node_sweeps_the_workspaces_its_killed_tasks_left_and_no_other(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    from qeval.executors.stream import node_workspace

    settings = Settings.from_env({"QEVAL_CACHE": str(tmp_path / "cache")})
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    host, root = socket.gethostname(), tmp_path / "cache" / "work"
    dead, live, other = (root / f"w3@{host}.pid{gone}-x", root / f"w3@{host}.pid{os.getpid()}-y",
                         root / f"w3@another-host.pid{gone}-z")
    for d in (dead, live, other):
        (d / "logs").mkdir(parents=True)
    ws = node_workspace(settings, "base")
    assert ws.parent == root and ws.name.startswith(f"base@{host}.pid{os.getpid()}-") and ws.is_dir()
    assert not dead.exists() and live.exists() and other.exists()
