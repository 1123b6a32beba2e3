"""Two campaigns at once on one machine: their ports, run folders and stores are their own, and the
variant both need is quantized into the shared cache without either one breaking the other."""

from __future__ import annotations

import pytest

from qeval.record.run import RunRecord
from qeval.settings import Settings

from ..conftest import campaign_file
from .conftest import ROOT, qeval, tiny_llama, wait_exit

pytestmark = pytest.mark.slow


def test_two_campaigns_at_once(spawn, tmp_path):
    settings = Settings.from_env()
    model = tiny_llama(settings, tmp_path / "tiny-llama")  # both campaigns quantize it, from scratch, at once
    before = set(settings.variants.glob(f"{model.name}-rtn-*.tmp-*"))  # another run's debris is not ours to judge
    procs, cfgs = [], []
    for name in ("one", "two"):
        cfg = campaign_file(
            tmp_path, name=name, file=f"{name}.yaml", model={"path": model}, output_dir=tmp_path / name,
            baseline={"name": "bf16", "method": "bf16"},
            variants=[{"name": "w4", "method": "rtn", "recipe": {"group_size": 32}}],
            engine={"enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 512},
            suites=[{"kind": "custom", "path": ROOT / "suites/custom/arithmetic.yaml"}],
            gates={"rules": [{"match": "*", "margin": 0.5}]}, mlflow={"enabled": False})
        cfgs.append(cfg)
        procs.append(qeval(spawn, "run", str(cfg), log=tmp_path / f"{name}.log"))
    for name, p in zip(("one", "two"), procs):
        wait_exit(p, [tmp_path / f"{name}.log", tmp_path / name])
    outs = [(tmp_path / f"{name}.log").read_text() for name in ("one", "two")]
    for name, p, out in zip(("one", "two"), procs, outs):
        assert p.returncode in (0, 1), out[-3000:]
        rec = RunRecord.load(tmp_path / name / name / "run.json")
        assert [v.status for v in rec.variants] == ["ok", "ok"], out[-3000:]
        assert all(s.n == 40 for v in rec.variants for s in v.suites)
    one, two = (RunRecord.load(tmp_path / n / n / "run.json") for n in ("one", "two"))
    # the same checkpoint (one cached folder), served by two servers of their own
    assert one.variants[1].checkpoint == two.variants[1].checkpoint
    assert one.variants[1].checkpoint_hash == two.variants[1].checkpoint_hash
    assert one.run_id != two.run_id
    leftovers = set(settings.variants.glob(f"{model.name}-rtn-*.tmp-*")) - before
    assert not leftovers, leftovers
