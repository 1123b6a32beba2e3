"""TGI as an external endpoint: request building and response parsing against responses recorded from
real TGI servers (fixtures/tgi/README.md names each one's source), served here from a loopback socket."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import numpy as np
import pytest

from qeval.config import EngineSpec, GenerationSpec, VariantSpec
from qeval.engines import Endpoint, build_engine
from qeval.engines.tgi import TgiEngine, parse_prompt_logprobs, prompt_logprobs_request
from qeval.errors import EngineError
from qeval.probe.client import stream_one
from qeval.settings import Settings
from qeval.suites.custom import Item, _request, _text
from qeval.suites.http import connect
from qeval.suites.logprobs import LogprobsSuite, chunk_record, compare_chunks, run_logprobs
from tests.loopback import Loopback, js
from tests.sse import paced, sse

FIXTURES = Path(__file__).parent / "fixtures" / "tgi"

# request fields TGI accepts, from components.schemas of docs/openapi.json in huggingface/
# text-generation-inference at db931fcf42da018a3657580c64bf2720f167f9ab
TGI_GENERATE_PARAMETERS = {
    "adapter_id", "best_of", "decoder_input_details", "details", "do_sample", "frequency_penalty", "grammar",
    "max_new_tokens", "repetition_penalty", "return_full_text", "seed", "stop", "temperature", "top_k",
    "top_n_tokens", "top_p", "truncate", "typical_p", "watermark"}
TGI_CHAT_FIELDS = {"frequency_penalty", "logit_bias", "logprobs", "max_tokens", "messages", "model", "n",
                   "presence_penalty", "response_format", "seed", "stop", "stream", "stream_options", "temperature",
                   "tool_choice", "tool_prompt", "tools", "top_logprobs", "top_p"}
TGI_COMPLETION_FIELDS = {"frequency_penalty", "max_tokens", "model", "prompt", "repetition_penalty", "seed", "stop",
                         "stream", "suffix", "temperature", "top_p"}


def fixture(name: str):
    return json.loads((FIXTURES / name).read_text())


def test_prompt_logprobs_request_uses_native_generate_at_the_root():
    url, payload = prompt_logprobs_request("http://tgi:8080/v1", "Test request")
    assert url == "http://tgi:8080/generate"
    assert payload["inputs"] == "Test request"
    p = payload["parameters"]
    assert p["decoder_input_details"] is True and p["details"] is True and p["max_new_tokens"] == 1
    assert "top_n_tokens" not in p  # alternatives exist only for generated tokens; the server caps them at 5
    assert set(p) <= TGI_GENERATE_PARAMETERS


def test_parse_prefill_of_a_recorded_bloom_response():
    body = fixture("test_bloom_560m.json")
    got = parse_prompt_logprobs(body)
    prefill = body["details"]["prefill"]
    assert got.tokens == [t["text"] for t in prefill]
    assert got.tokens[:3] == ["Pour", " dég", "uster"]
    assert got.token_logprobs[0] is None  # nothing predicts the first token
    assert got.token_logprobs[1] == pytest.approx(-10.5703125)
    assert all(isinstance(x, float) for x in got.token_logprobs[1:])
    assert got.top_logprobs[0] == {} and got.top_logprobs[1] == {" dég": -10.5703125}
    # the generated token's details are not part of the prompt
    assert len(got.tokens) == len(prefill) and body["details"]["tokens"][0]["text"] not in got.tokens[-1:]


def test_parse_prefill_with_a_bos_token():
    got = parse_prompt_logprobs(fixture("test_flash_llama.json"))
    assert got.tokens == ["<s>", "Test", "request"]
    assert got.token_logprobs == [None, -8.6875, -11.546875]


def test_tgi3_without_prefill_logprobs_says_how_to_start_it():
    # recorded from TGI 3 with decoder_input_details=True: an empty prefill
    with pytest.raises(EngineError, match="--enable-prefill-logprobs"):
        parse_prompt_logprobs(fixture("test_compressed_tensors_w8a8_int.json"))


def test_not_a_generate_response():
    with pytest.raises(EngineError, match="not a TGI /generate response"):
        parse_prompt_logprobs(fixture("test_flash_llama_completion_single_prompt.json"))
    assert parse_prompt_logprobs([fixture("test_flash_llama.json")]).tokens[0] == "<s>"  # the compat route's list


def test_a_tgi_record_scores_nll_and_says_it_has_no_alternatives():
    lp = parse_prompt_logprobs(fixture("test_bloom_560m.json"))
    rec = chunk_record(3, "text", 10, lp.__dict__, alternatives=False)
    assert rec.item_id == "0003" and rec.extra["alternatives"] is False
    assert rec.scores["nll"] == pytest.approx(-np.mean(lp.token_logprobs[1:]))
    assert rec.extra["n"] == len(lp.tokens) - 1


def test_comparing_with_a_tgi_side_uses_the_actual_token_only():
    lp = parse_prompt_logprobs(fixture("test_flash_llama.json"))
    tgi_rec = chunk_record(0, "Test request", 5, lp.__dict__, alternatives=False)
    # a vLLM-shaped baseline on the same tokens, with alternatives the TGI side cannot match
    base = chunk_record(0, "Test request", 5, {"tokens": lp.tokens, "token_logprobs": [None, -8.0, -11.0],
                                               "top_logprobs": [None, {"Test": -8.0, "A": -0.5},
                                                                {"request": -11.0, " x": -0.1}]})
    cc = compare_chunks([base], [tgi_rec])
    assert cc.alternatives is False and cc.ids == ["0000"]

    def binary_kl(p_lp: float, q_lp: float) -> float:  # KL over {the actual token, the rest}
        p, q = math.exp(p_lp), math.exp(q_lp)
        return p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))

    want = np.mean([binary_kl(-8.0, -8.6875), binary_kl(-11.0, -11.546875)])
    assert cc.kl[0] == pytest.approx(want)
    assert compare_chunks([base], [base]).alternatives is True  # two vLLM sides keep the top-k


def test_run_logprobs_goes_through_generate_on_a_tgi_endpoint():
    with Loopback({"POST /generate": js(fixture("test_bloom_560m.json"))}) as root:
        ep = Endpoint(base_url=root + "/v1", model="bigscience/bloom-560m", tokenizer=None, engine="tgi")
        suite = LogprobsSuite(name="c", chunks=["Pour déguster un ortolan, il faut tout d'abord"], top_k=10, key="k")
        got = []
        run_logprobs(suite, ep, set(), got.extend)
    assert len(got) == 1 and got[0].extra["alternatives"] is False and got[0].extra["tokens"][0] == "Pour"


def test_the_generate_request_that_reaches_the_server():
    server = Loopback({"POST /generate": js(fixture("test_flash_llama.json"))})
    with server as root:
        ep = Endpoint(base_url=root + "/v1", model="m", tokenizer=None, engine="tgi")
        run_logprobs(LogprobsSuite(name="c", chunks=["Test request"], top_k=5, key="k"), ep, set(), lambda r: None)
    (route, body), = server.seen
    assert route == "POST /generate"
    assert json.loads(body)["parameters"]["decoder_input_details"] is True


def test_tgi3_without_prefill_logprobs_fails_at_once_not_after_retries():
    server = Loopback({"POST /generate": js(fixture("test_compressed_tensors_w8a8_int.json"))})
    with server as root:
        ep = Endpoint(base_url=root + "/v1", model="m", tokenizer=None, engine="tgi")
        with pytest.raises(EngineError, match="--enable-prefill-logprobs"):
            run_logprobs(LogprobsSuite(name="c", chunks=["What is deep learning?"], top_k=5, key="k"), ep, set(),
                         lambda r: None)
    assert len(server.seen) == 1


def test_custom_suite_requests_are_ones_tgi_accepts_and_its_answers_parse():
    gen = GenerationSpec(max_tokens=10, stop=["\n"])
    path, payload = _request(Item(id="a", prompt="What is Deep Learning?", reference="x"), gen, "tgi")
    assert path == "/chat/completions" and set(payload) <= TGI_CHAT_FIELDS
    path, payload = _request(Item(id="a", prompt="What is Deep Learning?", reference="x"),
                             gen.model_copy(update={"chat": False}), "tgi")
    assert path == "/completions" and set(payload) <= TGI_COMPLETION_FIELDS
    assert _text("/chat/completions", fixture("test_chat_llama_simple.json")).startswith("As of your last question")
    assert _text("/completions", fixture("test_flash_llama_completion_single_prompt.json")) == \
        " A Beginner’s Guide\nDeep learning is a subset"


def test_probe_counts_tokens_from_tgi_chunks_without_usage():
    # the recorded stream of four prompts; a single-prompt stream is the chunks of index 0
    chunks = [c for c in fixture("test_flash_llama_completion_many_prompts_stream.json")
              if c["choices"][0]["index"] == 0]
    parts = [(0, sse(c)) for c in chunks] + [(0, sse("[DONE]"))]

    async def go():
        async with paced(parts) as url, connect(url, None, 5, 1) as c:
            return await stream_one(c, "tgi", "What is Deep Learning?", 10)

    res = asyncio.run(go())
    assert res.ok and res.output_tokens == len(chunks) == 10
    assert res.tpot is not None and len(res.itls) == 9


def test_tgi_engine_checks_the_endpoint_and_reads_its_version(tmp_path):
    # /v1/models as TGI's openai_get_model_info builds it; /info with the fields of TGI's Info schema
    routes = {"GET /v1/models": js({"object": "list", "data": [{"id": "meta-llama/Llama-3.1-8B-Instruct",
                                                                "object": "model", "created": 0,
                                                                "owned_by": "meta-llama/Llama-3.1-8B-Instruct"}]}),
              "GET /info": js({"model_id": "meta-llama/Llama-3.1-8B-Instruct", "version": "3.3.6",
                               "max_input_tokens": 4095, "max_total_tokens": 4096, "router": "text-generation-router"}),
              "GET /health": js({})}
    with Loopback(routes) as root:
        v = VariantSpec(name="tgi-8b", method="external", endpoint=root, engine={"kind": "tgi"})
        engine = build_engine("tgi", v, None, EngineSpec(kind="tgi"), Settings(cache=tmp_path), tmp_path)
        assert isinstance(engine, TgiEngine)
        with engine as ep:
            assert ep.engine == "tgi" and ep.engine_version == "3.3.6"
            assert ep.base_url == root + "/v1" and ep.model == "meta-llama/Llama-3.1-8B-Instruct"
            assert engine.health()
    assert not engine.health()  # the server is gone


def test_campaign_compares_a_tgi_variant_on_kl_only(tmp_path):
    from qeval.pipeline.judge import judge_view
    from qeval.config import CampaignConfig

    lp = parse_prompt_logprobs(fixture("test_bloom_560m.json")).__dict__
    shifted = {**lp, "token_logprobs": [None] + [x - 0.05 for x in lp["token_logprobs"][1:]]}
    base = [chunk_record(i, f"t{i}", 10, lp, alternatives=False) for i in range(4)]
    cand = [chunk_record(i, f"t{i}", 10, shifted, alternatives=False) for i in range(4)]
    suite = LogprobsSuite(name="c", chunks=[f"t{i}" for i in range(4)], top_k=10, key="lp")
    cfg = CampaignConfig.model_validate({
        "name": "t", "model": {"path": str(tmp_path)}, "output_dir": str(tmp_path),
        "baseline": {"name": "base", "method": "external", "endpoint": "http://a:1", "engine": {"kind": "tgi"}},
        "variants": [{"name": "q", "method": "external", "endpoint": "http://b:1", "engine": {"kind": "tgi"}}],
        "suites": [{"kind": "logprobs", "name": "c"}]})
    (part,) = suite.parts
    pairing = suite.pair(part, base, cand)
    item, chunks = pairing.views  # NLL item by item (reported), KL and top-1 by chunk (gated)
    out = judge_view(cfg.gates, cfg.seed, "q", part, chunks)[0]
    assert [c.metric for c in out] == ["kl"]  # no top-1 agreement from actual-token-only records
    d = pairing.distribution[0]
    assert d.kl_mean > 0 and d.top1_agreement is None and "TGI" in d.method
