"""What an engine can serve and how to ask it: declared by each engine, read by suites and the probe.

Suites and the probe never branch on an engine's name; they ask `endpoint.capabilities`: the route to
a text's prompt log-probabilities (or None), whether /v1/completions takes token ids, which Prometheus
names on /metrics mean queue time, TTFT, KV-cache usage or running requests, and what memory it reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol


@dataclass(frozen=True)
class MetricNames:
    """Where one engine keeps each summary field on its /metrics. Where a field lists several names, the
    first one the server exposes wins (names changed across versions)."""

    engine: str  # recorded as the server view's `engine`
    label: str  # how a note names it ("vLLM")
    means: Mapping[str, tuple[str, ...]]  # field -> histograms in seconds: the step's mean, in ms
    gauges: Mapping[str, tuple[str, ...]]  # field -> gauges sampled during the step: mean and max
    counters: Mapping[str, tuple[str, ...]]  # field -> counters: the step's increase
    # counters whose sum moves whenever the engine makes a token: the watchdog's sign of progress
    tokens: tuple[str, ...] = ()
    hint: str = ""  # why a server of this engine may serve none of these names

    def all_names(self) -> set[str]:
        return {n for table in (self.means, self.gauges, self.counters) for names in table.values() for n in names}


class Asked(Protocol):
    """What a route reads of the endpoint it asks (engines.base.Endpoint is one): an Endpoint carries its engine's
    capabilities, so these name only the part of it they read."""

    @property
    def base_url(self) -> str: ...

    @property
    def model(self) -> str: ...


class PromptLogprobsRoute(Protocol):
    """How an engine returns a text's own prompt log-probabilities."""

    # True: each prompt position lists top-k alternatives; False: the actual token's logprob only
    alternatives: bool

    def request(self, endpoint: Asked, text: str, k: int) -> tuple[str, dict[str, Any]]:
        """(url, JSON body) of the one POST that asks for them; a url without a scheme is under base_url."""
        ...

    def parse(self, body: Any) -> dict[str, list]:
        """The response -> {"tokens", "token_logprobs", "top_logprobs"} (OpenAI's `echo` shape). Raises
        KeyError / ValueError on a malformed answer (retried), EngineError where retrying cannot help."""
        ...


@dataclass(frozen=True)
class EchoLogprobs:
    """OpenAI /v1/completions with `echo` and `logprobs=k`, no tokens generated (vLLM and its imitators)."""

    alternatives: bool = True

    def request(self, endpoint: Asked, text: str, k: int) -> tuple[str, dict[str, Any]]:
        return "/completions", {"model": endpoint.model, "prompt": text, "max_tokens": 0, "echo": True,
                                "logprobs": k, "temperature": 0.0}

    def parse(self, body: Any) -> dict[str, list]:
        return body["choices"][0]["logprobs"]


ECHO_LOGPROBS = EchoLogprobs()


class TokenizeRoute(Protocol):
    """How an engine turns text into its own token ids, and takes those ids back as a prompt: what a suite
    needs to cut a document at an exact length in tokens, the same for every variant of one tokenizer."""

    def request(self, endpoint: Asked, text: str) -> tuple[str, dict[str, Any]]:
        """(url, JSON body) of the one POST that tokenizes `text`; a url without a scheme is under the
        server's root (not its /v1)."""
        ...

    def parse(self, body: Any) -> "Tokenized":
        """The response -> its ids and the server's context length. Raises KeyError / ValueError on a
        malformed answer."""
        ...

    def prompt(self, ids: list[int]) -> Any:
        """The `prompt` of a /v1/completions request that sends these ids."""
        ...


@dataclass(frozen=True)
class Tokenized:
    ids: tuple[int, ...]
    max_model_len: int | None  # the server's context length, where it says it


@dataclass(frozen=True)
class VllmTokenize:
    """vLLM's `POST /tokenize` -> {count, max_model_len, tokens}; its completions take a list of ids as the prompt.
    No special tokens are added: a document's ids are its text's alone, on every variant alike."""

    def request(self, endpoint: Asked, text: str) -> tuple[str, dict[str, Any]]:
        return "/tokenize", {"model": endpoint.model, "prompt": text, "add_special_tokens": False}

    def parse(self, body: Any) -> Tokenized:
        ids = tuple(int(t) for t in body["tokens"])
        n = body.get("max_model_len")
        return Tokenized(ids=ids, max_model_len=int(n) if n is not None else None)

    def prompt(self, ids: list[int]) -> Any:
        return list(ids)


VLLM_TOKENIZE = VllmTokenize()


@dataclass(frozen=True)
class Capabilities:
    """One engine's declaration; an Endpoint carries its engine's."""

    prompt_logprobs: PromptLogprobsRoute | None = ECHO_LOGPROBS  # None: it serves none (suites needing them are refused)
    token_prompts: bool = True  # /v1/completions takes a list of token ids as the prompt (else text only)
    # its route from text to its own token ids and back into a prompt (None: it has none; suites that cut
    # documents at a length in tokens are refused)
    tokenize: TokenizeRoute | None = VLLM_TOKENIZE
    # the name tables its /metrics follows; None: not known (a server someone else runs): any known one
    metrics: tuple[MetricNames, ...] | None = ()
    memory: tuple[str, ...] = ()  # the EngineMemory fields its memory() fills; the others stay None
    starts_server: bool = True  # False: qeval only connects to one that someone else runs (method external)
