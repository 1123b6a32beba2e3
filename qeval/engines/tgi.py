"""Text Generation Inference (TGI) that someone already runs: an external endpoint with TGI's own routes.

Generation goes through TGI's OpenAI-compatible routes (/v1/chat/completions, /v1/completions), as for
any external endpoint. Prompt log-probabilities go through TGI's native /generate with
`decoder_input_details`, since its OpenAI routes serve neither `echo` nor prompt logprobs. Two limits
of TGI shape what qeval gets there: alternatives (`top_n_tokens`) exist only for generated tokens,
never for prompt tokens, so each prompt position carries its actual token's logprob alone; and TGI 3
returns an empty `prefill` unless it was started with `--enable-prefill-logprobs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import httpx

from ..errors import EngineError
from .base import Endpoint
from .capabilities import Capabilities, MetricNames
from .external import ExternalEngine
from .registry import ENGINES
from .spec import TgiSpec

# names from TGI's docs/source/reference/metrics.md; TGI records no per-request TTFT, prefill or decode time
METRICS = MetricNames(
    engine="tgi", label="TGI",
    means={"queue": ("tgi_request_queue_duration",),
           # TGI's inference time over generated tokens: unlike vLLM's TPOT, it includes the prefill
           "tpot": ("tgi_request_mean_time_per_token_duration",),
           "inference": ("tgi_request_inference_duration",),
           "e2e": ("tgi_request_duration",)},
    gauges={"running": ("tgi_batch_current_size",), "waiting": ("tgi_queue_size",)},
    counters={})


def server_root(base_url: str) -> str:
    """TGI's native routes (/generate, /info, /health, /metrics) sit at the root, beside /v1."""
    return base_url.rstrip("/").removesuffix("/v1")


@dataclass(frozen=True)
class GenerateLogprobs:
    """Prompt logprobs through TGI's native /generate with `decoder_input_details`: the actual token's only."""

    alternatives: bool = False

    def request(self, endpoint: Endpoint, text: str, k: int) -> tuple[str, dict[str, Any]]:
        return prompt_logprobs_request(endpoint.base_url, text)

    def parse(self, body: Any) -> dict[str, list]:
        return parse_prompt_logprobs(body).__dict__


@ENGINES.register("tgi")
class TgiEngine(ExternalEngine):
    kind = "tgi"
    label = "TGI"
    Spec = TgiSpec
    # its /v1/completions takes text only; qeval starts no TGI server (method external)
    capabilities = Capabilities(prompt_logprobs=GenerateLogprobs(), token_prompts=False, tokenize=None, metrics=(METRICS,),
                                starts_server=False)

    def _version(self) -> str:
        # TGI has no /version; /info names its version (and the model it serves)
        try:
            info = httpx.get(server_root(self.base_url) + "/info", timeout=5, headers=self._headers).json()
            return str(info.get("version", ""))
        except (httpx.HTTPError, ValueError, AttributeError):
            return ""

    def health(self) -> bool:
        # TGI's /health runs a generation through the shards: stricter than listing /v1/models
        try:
            return httpx.get(server_root(self.base_url) + "/health", timeout=10, headers=self._headers).status_code == 200
        except httpx.HTTPError:
            return False


def prompt_logprobs_request(base_url: str, text: str) -> tuple[str, dict[str, Any]]:
    """The /generate call that returns a text's prompt tokens and their logprobs: (url, payload)."""
    # TGI generates at least one token; greedy so the call is deterministic. No top_n_tokens: TGI
    # lists alternatives only for generated tokens, and refuses more than its --max-top-n-tokens (5).
    return server_root(base_url) + "/generate", {
        "inputs": text,
        "parameters": {"max_new_tokens": 1, "do_sample": False, "details": True, "decoder_input_details": True}}


@dataclass(frozen=True)
class PromptLogprobs:
    """A text's prompt tokens in the shape vLLM's `echo` gives them (what suites/logprobs.py records)."""

    tokens: list[str]
    token_logprobs: list[float | None]  # None where nothing predicts the token (the first)
    top_logprobs: list[dict[str, float]]  # per position the actual token only: TGI lists no alternatives there


def parse_prompt_logprobs(body: Any) -> PromptLogprobs:
    """A /generate response with `decoder_input_details` -> the prompt's tokens and their logprobs."""
    if isinstance(body, list):  # TGI's compat route `/` answers with a list of one
        body = body[0] if body else {}
    try:
        prefill = body["details"]["prefill"]
        tokens = [str(t["text"]) for t in prefill]
        raw = [t.get("logprob") for t in prefill]
    except (KeyError, TypeError) as e:
        raise EngineError(f"not a TGI /generate response with details.prefill ({type(e).__name__}: {e})") from None
    if not prefill:
        raise EngineError("TGI returned no prompt logprobs (details.prefill is empty): TGI 3 serves them only "
                          "when started with --enable-prefill-logprobs")
    lps = [None if x is None or not math.isfinite(x) else float(x) for x in raw]
    return PromptLogprobs(tokens=tokens, token_logprobs=lps,
                          top_logprobs=[{} if x is None else {tok: x} for tok, x in zip(tokens, lps)])
