"""`model: {hf: org/name, revision: ...}`: the snapshot in the local Hugging Face cache, offline here (no hub),
keyed by its content as the same files in a folder are."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.errors import ConfigError, QevalError
from qeval.hashing import tree_hash
from qeval.pipeline.plan import base_checkpoint
from qeval.settings import Settings
from tests.conftest import small_campaign

from .hub_cache import add_snapshot

ROOT = Path(__file__).resolve().parent.parent
EMBEDDED = Settings.from_env().models / "smollm2-135m-instruct"  # built by `make setup`
REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"
COMMIT = "a" * 40
OLDER = "b" * 40


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    """An empty hub cache that huggingface_hub uses, offline (as HF_HUB_CACHE and HF_HUB_OFFLINE=1 make it)."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def _tiny(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 64}')
    (folder / "model.safetensors").write_bytes(weights * (2 << 20))  # past LFS_FROM: a blob named by its sha256
    (folder / "tokenizer.json").write_text("{}")
    return folder


def _files(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_snapshot_is_keyed_as_the_same_files_in_a_folder_and_nothing_is_written_into_the_cache(
        tmp_path, offline_cache):
    folder = _tiny(tmp_path / "folder", b"\x01")
    snap = add_snapshot(offline_cache, REPO, folder, COMMIT)
    before = _files(offline_cache)
    assert tree_hash(snap) == tree_hash(folder)
    assert _files(offline_cache) == before  # no memo beside the hub's files


def test_the_campaign_resolves_hf_by_ref_tag_and_commit(tmp_path, offline_cache):
    now = add_snapshot(offline_cache, REPO, _tiny(tmp_path / "now", b"\x01"), COMMIT, refs=("main",))
    old = add_snapshot(offline_cache, REPO, _tiny(tmp_path / "old", b"\x02"), OLDER, refs=("v1.0",))
    settings = Settings(cache=tmp_path / "qeval")
    for written, snap in [(f"{{hf: {REPO}}}", now), (f"{{hf: {REPO}, revision: main}}", now),
                          (f"{{hf: {REPO}, revision: v1.0}}", old), (f"{{hf: {REPO}, revision: {OLDER}}}", old)]:
        cfg = load_config(small_campaign(tmp_path, written))
        assert base_checkpoint(cfg, settings) == snap, written
    assert tree_hash(now) != tree_hash(old)


def test_a_model_or_revision_not_in_the_cache_offline_names_the_id_revision_and_cache(tmp_path, offline_cache):
    add_snapshot(offline_cache, REPO, _tiny(tmp_path / "now", b"\x01"), COMMIT)
    settings = Settings(cache=tmp_path / "qeval")
    for model, revision in [("org/absent", "main"), (REPO, "v9"), (REPO, "c" * 40)]:
        cfg = load_config(small_campaign(tmp_path, f"{{hf: {model}, revision: {revision}}}"))
        with pytest.raises(QevalError) as e:
            base_checkpoint(cfg, settings)
        assert not isinstance(e.value, ConfigError) and e.value.exit_code == 3  # this machine lacks it
        assert f"{model} at revision {revision}" in str(e.value) and str(offline_cache) in str(e.value)
        assert "hf download" in str(e.value)


@pytest.mark.parametrize("model, expect", [
    ("{hf: not a model id}", "model.hf: not a Hugging Face model id"),
    (f"{{hf: {REPO}, builtin: smollm2-135m-instruct}}", "give exactly one of `path`, `builtin` or `hf`"),
    ("{builtin: smollm2-135m-instruct, revision: v1}", "`revision` is the revision of `hf`"),
])
def test_a_bad_model_entry_is_a_config_error_naming_its_line(tmp_path, model, expect):
    with pytest.raises(ConfigError, match="line 2") as e:
        load_config(small_campaign(tmp_path, model))
    assert expect in str(e.value)


def test_a_folder_or_embedded_model_dumps_no_hub_keys(tmp_path):
    dumped = load_config(small_campaign(tmp_path, "{builtin: smollm2-135m-instruct}")).model_dump(mode="json")["model"]
    assert "hf" not in dumped and "revision" not in dumped
    hf = load_config(small_campaign(tmp_path, f"{{hf: {REPO}}}")).model_dump(mode="json")["model"]
    assert hf["hf"] == REPO and hf["revision"] == "main"


def test_the_embedded_model_as_a_hub_snapshot_validates_through_the_cli_and_keeps_its_key(tmp_path):
    cache = tmp_path / "hub"
    snap = add_snapshot(cache, REPO, EMBEDDED, COMMIT)
    assert tree_hash(snap) == tree_hash(EMBEDDED)
    env = {**__import__("os").environ, "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1"}
    ok = subprocess.run([sys.executable, "-m", "qeval.cli", "validate", str(small_campaign(tmp_path, f"{{hf: {REPO}}}"))],
                        capture_output=True, text=True, env=env, timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert "ok — 2 variants" in ok.stdout
    gone = subprocess.run([sys.executable, "-m", "qeval.cli", "validate",
                           str(small_campaign(tmp_path, "{hf: HuggingFaceTB/SmolLM2-360M-Instruct}"))],
                          capture_output=True, text=True, env=env, timeout=300)
    assert gone.returncode == 3, gone.stderr
    assert "HuggingFaceTB/SmolLM2-360M-Instruct at revision main" in gone.stderr and str(cache) in gone.stderr


def test_a_ray_node_finds_the_snapshot_at_the_same_commit_in_its_own_hub_cache(tmp_path, offline_cache):
    from qeval.pipeline.worker import base_on_node

    driver_hub = tmp_path / "driver-hub"
    driver_snap = add_snapshot(driver_hub, REPO, _tiny(tmp_path / "m", b"\x01"), COMMIT)
    node_snap = add_snapshot(offline_cache, REPO, tmp_path / "m", COMMIT)  # the node's own cache
    driver, node = Settings(cache=tmp_path / "driver"), Settings(cache=tmp_path / "node")
    assert base_on_node(driver_snap, driver, node) == node_snap
    assert base_on_node(driver.models / "x", driver, node) == node.models / "x"
    add_snapshot(driver_hub, "org/other", tmp_path / "m", OLDER)
    with pytest.raises(QevalError, match="org/other at revision " + OLDER):  # not on the node, offline
        base_on_node(driver_hub / "models--org--other" / "snapshots" / OLDER, driver, node)


def test_a_local_dir_download_hashes_as_its_files_whatever_its_download_records_say(tmp_path):
    """`hf download --local-dir` leaves .cache/huggingface/download/*.metadata files holding the time of the
    download: two downloads of the same files are one checkpoint."""
    keys = set()
    for n in range(2):
        d = tmp_path / f"d{n}"
        (d / ".cache" / "huggingface" / "download").mkdir(parents=True)
        (d / "config.json").write_text("{}")
        (d / ".cache" / "huggingface" / "download" / "config.json.metadata").write_text(f"abc\n{1700000000 + n}\n")
        keys.add(tree_hash(d))
    assert len(keys) == 1
