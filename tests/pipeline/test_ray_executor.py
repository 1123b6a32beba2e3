"""The `ray` executor on a real two-node Ray cluster (tests/ray_cluster.py) with the fake engine: the same
records and verdicts as the local executor, variants on both nodes, a worker node killed mid-variant and
its variant run again from the merged records, a variant no node can hold refused before anything is
written, an unreachable cluster exit 3. The driver is `qeval run` in a process of its own, as a user runs it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from qeval.engines.fake import FakeEngineSpec, write_checkpoint
from qeval.executors.leases import overlaps
from tests.conftest import kill_tree, sees
from tests.ray_cluster import QUIET, Cluster, free_port
from tests.pipeline.test_pipeline_fake import N, _campaign, _records, _rows, _suites, _verdicts

QEVAL = [sys.executable, "-m", "qeval.cli"]

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # GPUs declared, not present: the head one, the worker two (for the tensor-parallel test)
    c = Cluster(tmp_path_factory.mktemp("ray")).start(workers=1, gpus={"head": 1, "worker1": 2})
    yield c
    try:
        live = sees(c.processes, "raylet", "gcs_server")  # the search that must find none of them once stopped
    finally:
        c.stop()
    live.assert_gone()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> Path:
    """The same campaign on the local executor: what the Ray runs must reproduce."""
    root = tmp_path_factory.mktemp("local")
    config = _campaign(root, token_delay_s=0.002)
    env = {**os.environ, "QEVAL_CACHE": str(root / "cache"), "QEVAL_RECORDS": "off"}
    r = subprocess.run([*QEVAL, "run", str(config), "--no-mlflow"], env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]  # w3 fails its gate
    return root / "runs" / "p"


def _on_ray(config: Path, executor: str) -> Path:
    text = config.read_text().replace("mlflow: {enabled: false}", f"mlflow: {{enabled: false}}\nexecutor: {executor}")
    config.write_text(text)
    return config


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, **QUIET, "QEVAL_CACHE": str(root / "driver-cache"), "QEVAL_RECORDS": "off"}


def _nodes(lines: str) -> dict[str, str]:
    """variant -> the node it last ran on, from the driver's lines."""
    return {m[1]: m[2] for m in re.finditer(r"^\[(\w+)\] running on (.+?)(?: \(attempt \d+\))?$", lines, re.M)}


def _run_gated(spawn, cluster: Cluster, root: Path, executor: str) -> tuple[Path, Path]:
    """The fake campaign on the cluster, through `qeval run` where the cluster is: its run folder and output
    (exit 1: w3 fails its gate, as in the local run)."""
    config = _on_ray(_campaign(root, token_delay_s=0.002), executor)
    out = root / "out.log"
    proc = spawn([*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(root),
                 stdout=out.open("w"), stderr=subprocess.STDOUT)
    assert proc.wait(timeout=300) == 1, out.read_text()[-3000:]
    return root / "runs" / "p", out


def test_a_campaign_on_two_nodes_gives_the_local_records_and_verdicts(cluster, local_run, spawn, tmp_path):
    run_dir, out = _run_gated(spawn, cluster, tmp_path, f'{{kind: ray, address: "{cluster.address}"}}')
    assert _records(run_dir) == _records(local_run)
    assert _verdicts(run_dir) == _verdicts(local_run)
    where = _nodes(out.read_text())
    assert set(where) == {"base", "w3", "same"} and len(set(where.values())) == 2, where  # one CPU per node
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["finished_at"] and [v["status"] for v in rec["variants"]] == ["ok", "ok", "ok"]
    assert [v["name"] for v in rec["variants"]] == ["base", "w3", "same"]  # the campaign's order, not finish order
    # the probe and the logs came back with the stream: the driver's run folder has them, the nodes' caches
    # got their own workspaces, never the driver's folder
    for v in rec["variants"]:
        assert (run_dir / v["probe_path"]).is_file() if v.get("probe_path") else True
        assert (run_dir / "logs" / f"engine-{v['name']}.log").is_file()
    assert not list((tmp_path / "driver-cache").glob("**/*.log"))
    assert json.loads((run_dir / "leases.json").read_text())["overlaps"] == 0


def test_a_worker_node_killed_mid_variant_is_run_again_from_the_merged_records(local_run, spawn, tmp_path):
    """Its own cluster: this test takes a node away."""
    c = Cluster(tmp_path / "ray").start(workers=1)
    live = None
    try:
        live = sees(c.processes, "raylet", "gcs_server")  # the search that must find none of them once stopped
        config = _on_ray(_campaign(tmp_path, token_delay_s=0.01), f'{{kind: ray, address: "{c.address}"}}')
        out = tmp_path / "out.log"
        proc = spawn([*c.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(tmp_path),
                     stdout=out.open("w"), stderr=subprocess.STDOUT)
        run_dir = tmp_path / "runs" / "p"
        worker = None
        deadline = time.monotonic() + 180
        while worker is None:  # a variant on the worker node, half way through its first suite
            assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
            for name, node in _nodes(out.read_text()).items():
                if "(worker1)" in node and _rows(run_dir, name) >= N // 2:
                    worker = name
            time.sleep(0.05)
        merged = _rows(run_dir, worker)
        c.nodes[1].kill()
        assert proc.wait(timeout=300) == 1, out.read_text()[-3000:]
        text = out.read_text()
        assert f"[{worker}] lost its worker" in text and "resuming from the merged records" in text
        # nothing lost, nothing twice (the rows' identity is their key); the checkpoints differ from the local
        # run's in their token delay only (a slower stream, for the kill to land mid-suite), so do the keys
        assert sorted(r[1:] for r in _records(run_dir)) == sorted(r[1:] for r in _records(local_run))
        assert _verdicts(run_dir) == _verdicts(local_run)
        assert merged >= N // 2 and _rows(run_dir, worker) == 2 * N
    finally:
        c.stop()
        if live is not None:
            live.assert_gone()


def test_sigterm_to_the_driver_cancels_its_tasks_and_their_engines_on_the_cluster(cluster, spawn, tmp_path):
    """SIGTERM to `qeval run` while variants run on both nodes of a cluster it did not start: exit 143 within
    10 s, the record written; the workers that ran its tasks and the engines they started are gone with it
    (force-cancelled; Ray also ends a finished driver's workers), while the cluster itself runs on."""
    config = _on_ray(_campaign(tmp_path, token_delay_s=0.05), f'{{kind: ray, address: "{cluster.address}"}}')
    out = tmp_path / "out.log"
    proc = spawn([*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(tmp_path),
                 stdout=out.open("w"), stderr=subprocess.STDOUT)
    run_dir = tmp_path / "runs" / "p"
    deadline = time.monotonic() + 180
    while len(_nodes(out.read_text())) < 2 or not all(_rows(run_dir, v) for v in _nodes(out.read_text())):
        assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
        time.sleep(0.05)

    def runs() -> list[psutil.Process]:  # the engines on the nodes, and the workers running qeval's tasks
        return [p for p in cluster.processes() if any(
            "fake_server.py" in a or a.startswith("ray::qeval") for a in _args(p))]

    live = sees(runs, "fake_server.py", "ray::qeval")
    proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    assert proc.wait(timeout=30) == 143, out.read_text()[-3000:]
    took = time.monotonic() - t0
    assert took < 10, took
    live.assert_gone(timeout=0.5)  # gone with the driver, not some time later
    print(f"SIGTERM on a cluster the run did not start: exit 143 after {took:.2f} s")
    rec = json.loads((run_dir / "run.json").read_text())
    assert not rec["finished_at"] and "partial" in {v["status"] for v in rec["variants"]}, rec["variants"]
    assert all(rec["verdicts"][v] == "NOT_EVALUATED" for v in rec["verdicts"] if v not in _finished(rec))
    assert sum("raylet" in " ".join(_args(p)) for p in cluster.processes()) == len(cluster.nodes)  # runs on


def _args(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline() or [""]
    except psutil.Error:
        return [""]


def _finished(rec: dict) -> set[str]:
    return {v["name"] for v in rec["variants"] if v["status"] == "ok"}


def test_a_variant_no_node_can_hold_is_refused_before_anything_is_written(cluster, tmp_path):
    config = _on_ray(_campaign(tmp_path), f'{{kind: ray, address: "{cluster.address}", resources: {{gpu_box: 1}}}}')
    r = subprocess.run([*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "variant base needs CPU 1, gpu_box 1 on one node" in r.stderr and cluster.address in r.stderr
    assert not (tmp_path / "runs" / "p" / "run.json").exists()


def test_an_unreachable_cluster_is_exit_3_with_the_address(tmp_path):
    address = f"127.0.0.1:{free_port()}"
    config = _on_ray(_campaign(tmp_path), f'{{kind: ray, address: "{address}"}}')
    r = subprocess.run([*QEVAL, "run", str(config), "--no-mlflow"], env=_env(tmp_path), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    assert f"no Ray cluster reachable at {address}" in r.stderr
    assert not (tmp_path / "runs" / "p" / "run.json").exists()


def test_packed_variants_share_quality_work_but_never_a_probe(cluster, local_run, spawn, tmp_path):
    """Half a CPU each: three variants on two one-CPU nodes, so two share a node. Their suites run side by
    side there; every probe has its node alone (the run's lease history shows it), and the records are
    the local run's."""
    run_dir, _ = _run_gated(spawn, cluster, tmp_path, f'{{kind: ray, address: "{cluster.address}", num_cpus: 0.5}}')
    assert _records(run_dir) == _records(local_run)
    book = json.loads((run_dir / "leases.json").read_text())
    leases = book["leases"]
    assert book["overlaps"] == 0 and overlaps(leases) == []
    assert all(h["end"] is not None for h in leases)  # every lease given back
    probes = [h for h in leases if h["kind"] == "exclusive"]
    assert sorted(h["holder"].split("#")[0] for h in probes) == ["base", "same", "w3"]
    # packing happened: two variants' quality work on one node at the same time
    shared = [h for h in leases if h["kind"] == "shared"]
    assert any(a["holder"] != b["holder"] and a["keys"] == b["keys"] and a["start"] < b["end"] and b["start"] < a["end"]
               for i, a in enumerate(shared) for b in shared[i + 1:]), leases


def test_packed_with_the_a_a_the_baselines_probe_never_waits_for_it(cluster, spawn, tmp_path):
    """Packed a quarter CPU each with the noise floor on: the A/A (the baseline served again at one request in
    flight) is submitted only once the baseline has finished, so the baseline's probe never waits for its quality
    work; every variant's record says how long its engine sat idle and how long its stages waited for leases."""
    config = _on_ray(_campaign(tmp_path, token_delay_s=0.002),
                     f'{{kind: ray, address: "{cluster.address}", num_cpus: 0.25}}')
    config.write_text(config.read_text() + "noise_floor: {enabled: true}\n")
    out = tmp_path / "out.log"
    proc = spawn([*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(tmp_path),
                 stdout=out.open("w"), stderr=subprocess.STDOUT)
    assert proc.wait(timeout=300) == 1, out.read_text()[-3000:]
    run_dir = tmp_path / "runs" / "p"
    book = json.loads((run_dir / "leases.json").read_text())
    leases = book["leases"]
    assert book["overlaps"] == 0 and overlaps(leases) == []
    [probe] = [h for h in leases if h["holder"].startswith("base#") and h["kind"] == "exclusive"]
    aa = [h for h in leases if h["holder"].startswith("base-aa#")]
    assert aa and min(h["asked"] for h in aa) >= probe["end"], leases
    rec = json.loads((run_dir / "run.json").read_text())
    assert [v["role"] for v in rec["variants"]] == ["baseline", "variant", "variant", "noise"]
    for v in rec["variants"]:
        assert v["idle_seconds"] is not None and v["idle_seconds"] >= 0 and v["lease_wait_seconds"] >= 0, v


def test_a_spent_time_budget_starts_no_more_variants_and_a_rerun_resumes(cluster, local_run, tmp_path):
    """`--max-minutes 0`: the budget is spent before any variant but the baseline is placed on a node; they
    are reported not evaluated (never PASS), and the same command without the budget finishes the run."""
    config = _on_ray(_campaign(tmp_path, token_delay_s=0.002), f'{{kind: ray, address: "{cluster.address}"}}')
    cmd = [*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"]
    cut = subprocess.run([*cmd, "--max-minutes", "0"], env=_env(tmp_path), capture_output=True, text=True,
                         timeout=300)
    rec = json.loads((tmp_path / "runs" / "p" / "run.json").read_text())
    assert [(v["name"], v["status"]) for v in rec["variants"]] == [("base", "ok"), ("w3", "skipped"),
                                                                   ("same", "skipped")], cut.stdout[-2000:]
    assert rec["verdicts"] == {"w3": "NOT_EVALUATED", "same": "NOT_EVALUATED"} and not rec["finished_at"]
    whole = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert whole.returncode == 1, whole.stdout[-2000:]
    assert _records(tmp_path / "runs" / "p") == _records(local_run)
    assert _verdicts(tmp_path / "runs" / "p") == _verdicts(local_run)


def test_the_driver_killed_mid_run_then_run_again_resumes(cluster, local_run, spawn, tmp_path):
    """SIGKILL to `qeval run` (the driver) while variants run on both nodes: Ray ends its tasks with it; the
    same command again finishes from the store, with the local run's records and verdicts."""
    config = _on_ray(_campaign(tmp_path, token_delay_s=0.01), f'{{kind: ray, address: "{cluster.address}"}}')
    cmd = [*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"]
    out = tmp_path / "out.log"
    proc = spawn(cmd, env=_env(tmp_path), stdout=out.open("w"), stderr=subprocess.STDOUT)
    run_dir = tmp_path / "runs" / "p"
    deadline = time.monotonic() + 180
    while _rows(run_dir, "base") < N // 2 or len(_nodes(out.read_text())) < 2:
        assert proc.poll() is None and time.monotonic() < deadline, out.read_text()[-3000:]
        time.sleep(0.05)
    kill_tree(proc, proc.test_token)
    assert not json.loads((run_dir / "run.json").read_text())["finished_at"]
    # what the killed tasks left (Ray may end a worker before its clean-up runs, or after: either is seen)
    left = [p for n in cluster.nodes for p in (n.cache / "work").glob("*")]
    again = subprocess.run(cmd, env=_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert again.returncode == 1, again.stdout[-3000:]
    ran = " ".join(_nodes(again.stdout).values())
    for n in cluster.nodes:  # a node that ran a task again swept what the killed ones left there
        if f"({n.name})" in ran and any(p.is_relative_to(n.cache) for p in left):
            assert not list((n.cache / "work").glob("*")), (n.name, left)
    assert sorted(r[1:] for r in _records(run_dir)) == sorted(r[1:] for r in _records(local_run))
    assert _verdicts(run_dir) == _verdicts(local_run)


def test_sequential_gates_on_ray_stop_where_the_local_run_stops(cluster, spawn, tmp_path):
    """The baseline's task goes first; each variant's task gets its records and stops at the local run's look."""
    from tests.pipeline.test_sequential_pipeline import SEQ, _campaign as seq_campaign, _run as seq_run

    (tmp_path / "local").mkdir()
    local = seq_run(tmp_path / "local", SEQ)
    root = tmp_path / "ray"
    root.mkdir()
    config = _on_ray(seq_campaign(root, SEQ), f'{{kind: ray, address: "{cluster.address}"}}')
    out = root / "out.log"
    proc = spawn([*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(root),
                 stdout=out.open("w"), stderr=subprocess.STDOUT)
    assert proc.wait(timeout=300) == 1, out.read_text()[-3000:]  # bad fails
    run_dir = root / "runs" / "s"
    assert _records(run_dir) == _records(local.run_dir)
    rec = json.loads((run_dir / "run.json").read_text())
    assert rec["verdicts"] == local.record.verdicts == {"bad": "FAIL", "same": "PASS"}
    used = lambda gates: sorted((g["variant"], g["suite"], g["verdict"], g["items_used"]) for g in gates)  # noqa: E731
    assert used(rec["gates"]) == used([g.model_dump() for g in local.record.gates])
    assert any(g["items_used"] == 100 for g in rec["gates"] if g["variant"] == "bad")


def tp_campaign(root: Path, quantize_s: float = 1.0, token_delay_s: float = 0.0, variants: int = 2) -> Path:
    """A baseline and `variants` variants quantized first (the fake quantizer, `quantize_s` each), each served on
    two GPUs (also benchmarks/tp_quantize_apart.py)."""
    answers = _suites(root)
    write_checkpoint(root / "ck" / "base", FakeEngineSpec(answers=answers, quantize_s=quantize_s,
                                                          token_delay_s=token_delay_s))
    methods = ["rtn", "int8", "gptq", "awq", "fp8"][:variants]
    listed = "".join(f"  - {{name: q{i + 1}, method: {m}, quantizer: fake}}\n" for i, m in enumerate(methods))
    path = root / "tp.yaml"
    path.write_text(f"""\
name: tp
model: {{path: ck/base}}
output_dir: runs
baseline: {{name: base, method: bf16}}
variants:
{listed}engine: {{kind: fake, device: gpu, tensor_parallel_size: 2, startup_timeout_s: 30}}
suites:
  - {{kind: custom, path: facts.yaml, concurrency: 1}}
gates: {{rules: [{{match: "*", margin: 0.4}}]}}
mlflow: {{enabled: false}}
""")
    return path


def test_a_tensor_parallel_variant_is_quantized_on_one_gpu_then_served_on_two_where_it_was_made(cluster, spawn,
                                                                                            tmp_path):
    """Quantizing takes one GPU, serving tensor_parallel_size: the make task holds one, so a variant's other GPU
    is not held idle meanwhile. The head declares one GPU (it could quantize, never serve): the make task is
    kept on a node that can serve (the worker, two GPUs), and the serving task follows it there, finding its
    checkpoint made. The records are the local executor's."""
    local = tmp_path / "local"
    local.mkdir()
    r = subprocess.run([*QEVAL, "run", str(tp_campaign(local)), "--no-mlflow"], capture_output=True, text=True,
                       env={**os.environ, "QEVAL_CACHE": str(local / "cache"), "QEVAL_RECORDS": "off"}, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]

    root = tmp_path / "ray"
    root.mkdir()
    config = _on_ray(tp_campaign(root), f'{{kind: ray, address: "{cluster.address}", num_cpus: 0.25}}')
    out = root / "out.log"
    proc = spawn([*cluster.run_prefix, *QEVAL, "run", str(config), "--no-mlflow"], env=_env(root),
                 stdout=out.open("w"), stderr=subprocess.STDOUT)
    assert proc.wait(timeout=300) == 0, out.read_text()[-3000:]
    text, run_dir = out.read_text(), root / "runs" / "tp"
    assert _records(run_dir) == _records(local / "runs" / "tp")
    record = json.loads((run_dir / "run.json").read_text())
    by_name = {v["name"]: v for v in record["variants"]}
    leases = json.loads((run_dir / "leases.json").read_text())["leases"]
    for name in ("q1", "q2"):
        made = re.search(rf"^\[{name}\] making its checkpoint on (.+)$", text, re.M)
        served = re.search(rf"^\[{name}\] running on (.+)$", text, re.M)
        assert made and served and "(worker1)" in made[1] and served[1] == made[1], text[-3000:]
        log = (run_dir / "logs" / f"quantize-{name}.log").read_text()  # streamed from the worker node
        assert re.search(r"CUDA_VISIBLE_DEVICES=\d+ ", log), log  # one GPU, not two
        assert by_name[name]["quantize_seconds"] >= 1.0  # made by its own task, on the record as if inline
        assert by_name[name]["gpus"] == 2  # the memory figures are totals over its two GPUs
        held = {h["holder"].split("#")[1]: len(h["keys"]) for h in leases if h["holder"].startswith(f"{name}#")}
        assert held == {"1": 1, "2": 2}, leases  # the make task one GPU, the serving task two
    assert "making its checkpoint" not in re.findall(r"^\[base\] .*$", text, re.M)[0]  # the base is not made
    # on a GPU every engine start takes the start lease, every quantizer the make lease: never a start beside
    # another start or a quantizer on one GPU
    held_as = lambda kind: {h["holder"].split("#")[0] for h in leases if h["kind"] == kind}  # noqa: E731
    assert held_as("start") == held_as("make") == {"base", "q1", "q2"}, leases  # the base makes nothing, briefly
    assert overlaps(leases) == [], leases
