"""A checkpoint re-made with identical tensors is the same checkpoint: real llm-compressor, twice, from
scratch into two caches; the records of how each was made (timings, temporary paths) differ, the
checkpoint's identity does not, so the variant's stored results are found again."""

from __future__ import annotations

import json

import pytest

from qeval.pipeline.campaign import Campaign
from qeval.config import CampaignConfig, EngineSpec, RecipeSpec, VariantSpec
from qeval.hashing import tree_hash
from qeval.quantize import quantizer_for
from qeval.settings import Settings

from .conftest import tiny_llama

pytestmark = pytest.mark.slow


def test_a_variant_requantized_to_identical_tensors_keeps_its_key(tmp_path):
    settings = Settings.from_env()
    base = tiny_llama(settings, tmp_path / "tiny-llama")
    variant = VariantSpec(name="w4", method="rtn", recipe=RecipeSpec(group_size=32))
    q = quantizer_for("rtn", runtime=settings.llmc, engine=EngineSpec(dtype="bfloat16"))
    made = [q.quantize(base, variant, tmp_path / f"cache-{k}" / "w4", tmp_path / f"q{k}.log") for k in (1, 2)]
    records = [json.loads((m / "qeval-quantize.json").read_text()) for m in made]
    assert records[0]["out"] != records[1]["out"]  # each made in its own temporary folder
    assert (made[0] / "model.safetensors").read_bytes() == (made[1] / "model.safetensors").read_bytes()
    assert tree_hash(made[0]) == tree_hash(made[1])
    cfg = CampaignConfig.model_validate({"name": "c", "model": {"path": str(base), "dtype": "bfloat16"},
                                         "baseline": {"name": "b", "method": "bf16"}, "variants": [variant.model_dump()],
                                         "suites": [{"kind": "logprobs"}]})
    camp = Campaign(cfg, settings)
    assert camp.variant_key(variant, tree_hash(made[0])) == camp.variant_key(variant, tree_hash(made[1]))
    (made[1] / "config.json").write_text((made[1] / "config.json").read_text().replace("}", ', "x": 1}', 1))
    assert tree_hash(made[1]) != tree_hash(made[0])  # what decides outputs still counts
