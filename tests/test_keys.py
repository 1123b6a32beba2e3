"""The content keys results, checkpoints and probes are stored under: all made by one helper that folds in
KEY_VERSION, and taken over what a campaign says, so that an engine kind or a setting added to qeval later
changes no existing campaign's hash or key unless the campaign sets it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Literal

import pytest
import yaml

from qeval import hashing
from qeval.config import CampaignConfig, LmEvalSuiteRef, LogprobsSuiteRef, VariantSpec, load_config
from qeval.engines import spec as engine_specs
from qeval.engines.base import EngineBase
from qeval.engines.registry import ENGINES
from qeval.engines.spec import ServedEngineSpec, VllmSpec
from qeval.engines.vllm import VllmEngine
from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import variant_key
from qeval.quantize.fake import FakeQuantizer
from qeval.quantize.llmcompressor import LlmCompressor
from qeval.settings import Runtime, Settings
from qeval.suites.custom import load_suite
from qeval.suites.lmeval_tasks import resolve_tasks
from qeval.suites.logprobs import load_logprobs_suite
from qeval.suites.logprobs_long import resolve_long
from tests.conftest import campaign_file

ROOT = Path(__file__).resolve().parent.parent
DEMO = next(p for p in (ROOT / "examples" / "demo.yaml", ROOT / "configs" / "demo.yaml") if p.is_file())


def _campaign(tmp_path: Path, extra: dict | None = None) -> Path:
    """A campaign file of its own (relative paths; `extra`: an engine block, say), its suite beside it."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "capitals.yaml").write_text((ROOT / "suites/custom/capitals.yaml").read_text())
    (tmp_path / "capitals.jsonl").write_text((ROOT / "suites/custom/capitals.jsonl").read_text())
    return campaign_file(tmp_path, model={"builtin": "smollm2-135m-instruct"}, output_dir=None,
                         variants=[{"name": "q", "method": "gptq"}],
                         suites=[{"kind": "custom", "path": "capitals.yaml"}], extra=extra)


class NewSpec(ServedEngineSpec):
    kind: Literal["newkind"] = "newkind"
    new_setting: int = 7  # a setting no other kind has, with a default of its own
    max_model_len: int = 4096  # and another default for a setting the other kinds have


class NewEngine(EngineBase):
    kind = "newkind"
    Spec = NewSpec


def test_a_new_built_in_engine_kind_leaves_every_campaigns_hash_alone(monkeypatch, tmp_path):
    gpu = _campaign(tmp_path, {"engine": {"device": "gpu", "max_num_seqs": 8}})
    before = {f: load_config(f).config_hash() for f in (DEMO, gpu)}
    monkeypatch.setitem(ENGINES._items, "newkind", NewEngine)  # registered as qeval's own kinds are
    monkeypatch.setitem(engine_specs._BUILT_IN, "newkind", NewSpec)
    assert load_config(gpu).engine.kind == "vllm"
    assert {f: load_config(f).config_hash() for f in (DEMO, gpu)} == before
    new = load_config(_campaign(tmp_path / "n", {"engine": {"kind": "newkind"}}))
    assert type(new.engine) is NewSpec and new.config_hash() != before[gpu]


class LaterVllmSpec(VllmSpec):
    new_knob: int = 3  # as if a newer qeval added a vLLM setting


def test_a_new_knob_at_its_default_leaves_the_hash_and_set_changes_it(monkeypatch, tmp_path):
    engine = _campaign(tmp_path, {"engine": {"kv_cache_gib": 4}})
    before = {f: load_config(f).config_hash() for f in (DEMO, engine)}
    monkeypatch.setattr(VllmEngine, "Spec", LaterVllmSpec)
    assert type(load_config(engine).engine) is LaterVllmSpec
    assert {f: load_config(f).config_hash() for f in (DEMO, engine)} == before
    written = _campaign(tmp_path / "w", {"engine": {"kv_cache_gib": 4, "new_knob": 3}})  # written, at its default
    assert load_config(written).config_hash() == before[engine]
    changed = load_config(_campaign(tmp_path / "s", {"engine": {"kv_cache_gib": 4, "new_knob": 5}}))
    assert changed.engine.new_knob == 5 and changed.config_hash() != before[engine]


def test_a_new_top_level_knob_at_its_default_leaves_the_hash(monkeypatch):
    from qeval import config

    class Later(CampaignConfig):
        new_knob: int = 3

    before = load_config(DEMO).config_hash()
    monkeypatch.setattr(config, "CampaignConfig", Later)
    later = config.load_config(DEMO)
    assert type(later) is Later and later.config_hash() == before
    data, _ = config.read_yaml(DEMO)
    assert Later.model_validate(data | {"new_knob": 4}).config_hash() != Later.model_validate(data).config_hash()


def test_where_results_are_logged_or_variants_run_is_no_part_of_the_hash(tmp_path):
    plain = load_config(_campaign(tmp_path / "a")).config_hash()
    elsewhere = _campaign(tmp_path / "b", {"mlflow": {"experiment": "other"}, "executor": {"kind": "local"}})
    assert load_config(elsewhere).config_hash() == plain


def _keys(tmp_path: Path) -> dict[str, str]:
    """One key of every kind qeval stores under."""
    settings = Settings(cache=tmp_path / "cache")
    cfg = load_config(DEMO)
    camp = Campaign(cfg, settings)
    base = tmp_path / "base"
    base.mkdir(exist_ok=True)
    (base / "config.json").write_text("{}")
    gptq = VariantSpec(name="w4", method="gptq")
    llmc = LlmCompressor(Runtime(name="llmc", python=Path("/nonexistent/python")), dtype="bfloat16")
    fake = FakeQuantizer(Runtime(name="fake", python=Path("/nonexistent/python")))
    vkey = camp.variant_key(cfg.baseline, "h")
    return {
        "config": cfg.config_hash(),
        "variant": vkey,
        "external": variant_key(VariantSpec(name="e", method="external", endpoint="http://127.0.0.1:9/v1"),
                                camp.engine_spec(cfg.baseline), settings, None),
        "custom suite": load_suite(ROOT / "suites/custom/capitals.yaml").key,
        "lm_eval suite": resolve_tasks(LmEvalSuiteRef(kind="lm_eval", tasks=["hellaswag"]), tmp_path)[0].key,
        "logprobs suite": load_logprobs_suite(LogprobsSuiteRef(kind="logprobs")).key,
        "long logprobs suite": resolve_long(LogprobsSuiteRef(kind="logprobs", corpus="pydoc", document_tokens=1024)).key,
        "checkpoint": llmc.cache_key(base, gptq),
        "fake checkpoint": fake.cache_key(base, gptq),
        "probe": str(camp.plan_of(cfg.baseline).probe_path(vkey)),
    }


def test_bumping_the_key_version_changes_every_kind_of_key(monkeypatch, tmp_path):
    now = _keys(tmp_path)
    assert _keys(tmp_path) == now  # keys are stable for the same inputs
    monkeypatch.setattr(hashing, "KEY_VERSION", hashing.KEY_VERSION + 1)
    bumped = _keys(tmp_path)
    assert [k for k in now if now[k] == bumped[k]] == []


# calls of stable_hash in the key-making modules outside a key_hash call: record fields, seeds, and a digest
# that a key_hash takes a line later
NOT_KEYS = {
    ("qeval/suites/custom.py", "_doc_hash"),  # an item's identity within its suite (pairs the variants)
    ("qeval/suites/custom.py", "sample_seeds"),  # the seeds of an item's samples
    ("qeval/suites/custom.py", "one"),  # a record's prompt hash
    ("qeval/suites/lmeval_preflight.py", "_marker"),  # the worker's text, in the marker's key
    ("qeval/suites/logprobs.py", "chunk_record"),  # a record's prompt and document hashes
    ("qeval/suites/logprobs_long.py", "document_record"),  # a record's prompt and document hashes
    ("qeval/suites/corpora.py", "key"),  # a document's text digest, which a key_hash takes with the others
    ("qeval/suites/needle.py", "needle_record"),  # a record's prompt and document hashes
    ("qeval/suites/needle.py", "resolve"),  # the filler's digest, which a key_hash takes with the others
    ("qeval/suites/needle_items.py", "seeded"),  # a haystack's random seed, no key
}
KEY_MODULES = ("qeval/pipeline", "qeval/quantize", "qeval/record/store.py", "qeval/probe", "qeval/suites",
               "qeval/config.py")


def _hash_calls(path: Path) -> list[tuple[str, int, bool]]:
    """(enclosing function, line, inside a key_hash call) of each stable_hash / hashlib call in a module."""
    out: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, func: str, in_key: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = node.name
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            hashlib = isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "hashlib"
            if name == "stable_hash" or hashlib:
                out.append((func, node.lineno, in_key))
            in_key = in_key or name == "key_hash"
        for child in ast.iter_child_nodes(node):
            visit(child, func, in_key)

    visit(ast.parse(path.read_text()), "<module>", False)
    return out


def test_every_key_is_made_by_key_hash():
    """A key made with stable_hash or hashlib would not change when KEY_VERSION is bumped: in the modules that
    make keys, those are used only inside a key_hash call (a digest of content it keys) or for what is no key."""
    files = [p for m in KEY_MODULES for p in ([ROOT / m] if m.endswith(".py") else sorted((ROOT / m).rglob("*.py")))]
    assert len(files) > 20
    found = {(str(p.relative_to(ROOT)), func): line for p in files for func, line, in_key in _hash_calls(p)
             if not in_key}
    assert set(found) <= NOT_KEYS, {k: v for k, v in found.items() if k not in NOT_KEYS}
    assert set(found) == NOT_KEYS  # none stale


def test_a_probe_keys_what_it_says():
    from qeval.config import ProbeSpec

    class Later(ProbeSpec):  # as if a newer qeval added a knob
        new_knob: int = 3

    base = ProbeSpec(enabled=True, concurrency=[1, 4])
    assert Later(enabled=True, concurrency=[1, 4]).key() == base.key() == {"enabled": True, "concurrency": [1, 4]}
    assert Later(enabled=True, concurrency=[1, 4], new_knob=4).key() == {**base.key(), "new_knob": 4}
    assert ProbeSpec(enabled=True, concurrency=[1, 4], warmup_until_steady=0.05).key() != base.key()
    assert ProbeSpec(enabled=True, concurrency=[1, 8]).key() != base.key()


def test_a_suite_keys_what_its_descriptor_says(tmp_path):
    (tmp_path / "items.jsonl").write_text((ROOT / "suites/custom/capitals.jsonl").read_text())
    desc = yaml.safe_load((ROOT / "suites/custom/capitals.yaml").read_text()) | {"items": "items.jsonl"}

    def key(**change) -> str:
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(desc | change))
        return load_suite(tmp_path / "s.yaml").key

    plain = key()
    gen = desc.get("generation", {})
    assert key(generation=gen | {"samples": 1}) == plain  # a default, written: the same suite
    assert key(generation=gen | {"max_tokens": 999}) != plain
    assert key(scorers=desc["scorers"] + [{"kind": "regex", "name": "r", "pattern": "x"}]) != plain


@pytest.mark.parametrize("recipe, same", [({"bits": 4, "ignore": ["lm_head"]}, True), ({"bits": 3}, False)])
def test_a_checkpoint_keys_the_recipe_knobs_set(tmp_path, recipe, same):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    q = LlmCompressor(Runtime(name="llmc", python=Path("/nonexistent/python")), dtype="bfloat16")
    plain = q.cache_key(base, VariantSpec(name="w", method="gptq"))
    assert (q.cache_key(base, VariantSpec(name="w", method="gptq", recipe=recipe)) == plain) is same


@pytest.mark.parametrize("setting, answers_differ", [
    ({"extra_args": ["--seed", "7"]}, True), ({"enforce_eager": True}, True), ({"max_num_seqs": 4}, True),
    ({"kv_cache_dtype": "fp8"}, True), ({"request_timeout_s": 30}, False), ({"startup_timeout_s": 60}, False),
    ({"max_restarts": 0}, False), ({"kv_cache_gib": 4}, False), ({"cpu_worker_process": True}, False)])
def test_a_variant_key_holds_every_engine_setting_that_can_change_an_answer(setting, answers_differ):
    """Records are shared by key: two variants whose engines could answer differently must never share one, and
    settings declared as changing no output (NEUTRAL) must not split them."""
    settings = Settings(cache=Path("/nonexistent"))
    v = VariantSpec(name="b", method="bf16")
    plain = variant_key(v, VllmSpec(dtype="bfloat16"), settings, "h")
    assert (variant_key(v, VllmSpec(dtype="bfloat16", **setting), settings, "h") != plain) == answers_differ


def test_a_served_engines_own_settings_enter_the_key():
    """TensorRT-LLM's backend (or any plugin Spec's own field) is not on a list to be keyed: it is keyed because set."""
    trt = engine_specs.TrtllmSpec
    settings = Settings(cache=Path("/nonexistent"))
    v = VariantSpec(name="b", method="bf16")
    keys = {variant_key(v, trt(dtype="bfloat16", device="gpu", backend=b), settings, "h") for b in ("pytorch", "tensorrt")}
    assert len(keys) == 2
