"""The campaign files shipped under examples/ and benchmarks/configs/ load: their suites, gate policies and
run folders resolve from wherever the file lies."""

from pathlib import Path

import pytest

from qeval.config import CustomSuiteRef, LmEvalSuiteRef, load_config

ROOT = Path(__file__).resolve().parent.parent
CAMPAIGNS = sorted((ROOT / "examples").glob("*.yaml")) + sorted((ROOT / "benchmarks" / "configs").glob("*.yaml"))


def test_the_examples_are_there():
    names = {p.name for p in CAMPAIGNS}
    assert {"demo.yaml", "demo-sequential.yaml", "gemma.yaml", "grid.yaml", "schemes.yaml", "noise-floor.yaml",
            "simulated.yaml", "gpu-quick.yaml", "gpu-smollm2.yaml", "gpu-llama8b.yaml", "kv-cache.yaml",
            "gpu-kv-cache.yaml"} <= names


@pytest.mark.parametrize("path", CAMPAIGNS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_shipped_campaign_loads(path):
    cfg = load_config(path)
    assert cfg.output_dir == ROOT / "runs"
    for s in cfg.suites:
        if isinstance(s, CustomSuiteRef):
            assert s.path.is_file(), s.path
        if isinstance(s, LmEvalSuiteRef):
            assert s.include_path.is_dir(), s.include_path
