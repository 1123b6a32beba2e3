"""Requests in flight sized from what the engine holds (engines/capacity.py size): each bound in turn decides."""

from __future__ import annotations

import pytest

from qeval.engines.capacity import Capacity, size


@pytest.mark.parametrize("capacity, prompt, output, cap, want", [
    # the KV cache decides: 100,000 tokens over (1,000 + 200) a request = 83 requests
    (Capacity(kv_tokens=100_000, max_num_seqs=256), 1_000, 200, 512, 83),
    # max_num_seqs decides: the cache holds 1,000,000 // 132 = 7,575, the scheduler 128
    (Capacity(kv_tokens=1_000_000, max_num_seqs=128), 100, 32, 256, 128),
    # the cap decides: an H200's 2,000,000 tokens over lm-eval's 2,048 = 976, max_num_seqs 1,024, cap 512
    (Capacity(kv_tokens=2_000_000, max_num_seqs=1_024), 2_048, 0, 512, 512),
    # a cache smaller than one request still serves one at a time
    (Capacity(kv_tokens=1_000, max_num_seqs=128), 2_048, 0, 256, 1),
    # only max_num_seqs known
    (Capacity(max_num_seqs=16), 2_048, 0, 256, 16),
    # only the cache known: 8,192 // (100 + 28) = 64
    (Capacity(kv_tokens=8_192), 100, 28, 256, 64),
])
def test_size_takes_the_least_of_cache_scheduler_and_cap(capacity, prompt, output, cap, want):
    assert size(capacity, prompt, output, cap) == want


@pytest.mark.parametrize("capacity", [None, Capacity()])
def test_an_engine_that_cannot_say_sizes_nothing(capacity):
    assert size(capacity, 100, 10, 256) is None


def test_an_engine_says_what_its_settings_fix(tmp_path):
    """vLLM's max_num_seqs as set, else its default for its OpenAI server (128 a CPU rank); TensorRT-LLM's
    max_batch_size where set, else nothing; an external endpoint nothing."""
    from qeval.config import VariantSpec
    from qeval.engines.external import ExternalEngine
    from qeval.engines.spec import ExternalSpec, TrtllmSpec, VllmSpec
    from qeval.engines.trtllm import TrtllmEngine
    from qeval.engines.vllm import VllmEngine
    from qeval.settings import Settings

    settings, v = Settings(cache=tmp_path / "cache"), VariantSpec(name="v", method="bf16")

    def made(cls, spec):
        return cls(variant=v, checkpoint=tmp_path, spec=spec, settings=settings, log_dir=tmp_path)

    assert made(VllmEngine, VllmSpec()).capacity() == Capacity(kv_tokens=None, max_num_seqs=128)
    assert made(VllmEngine, VllmSpec(max_num_seqs=32)).capacity().max_num_seqs == 32
    assert made(TrtllmEngine, TrtllmSpec(device="gpu", max_batch_size=64)).capacity() == Capacity(max_num_seqs=64)
    assert made(TrtllmEngine, TrtllmSpec(device="gpu")).capacity() is None
    ext = VariantSpec(name="e", method="external", endpoint="http://127.0.0.1:1/v1", served_model="m")
    assert ExternalEngine(variant=ext, checkpoint=None, spec=ExternalSpec(), settings=settings,
                          log_dir=tmp_path).capacity() is None
