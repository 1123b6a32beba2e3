"""An endpoint someone already runs: qeval neither starts nor stops it, only checks it answers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from ..errors import ConfigError, EngineError
from .base import Endpoint, EngineBase, EngineMemory, ServedVariant, bearer_headers
from .capabilities import ECHO_LOGPROBS, Capabilities
from .registry import ENGINES
from .spec import EngineSpec, ExternalSpec

if TYPE_CHECKING:
    from ..settings import Settings


@ENGINES.register("external")
class ExternalEngine(EngineBase):
    kind = "external"  # what the Endpoint says served it (a subclass names its server)
    Spec = ExternalSpec
    # any OpenAI-compatible server: its /metrics may follow any engine's names qeval knows; memory not ours
    capabilities = Capabilities(prompt_logprobs=ECHO_LOGPROBS, token_prompts=True, metrics=None, starts_server=False)
    log_path = None  # nothing of qeval's runs, so no log
    startup_seconds = None
    hung = None  # no watchdog: qeval cannot restart it

    def __init__(self, *, variant: ServedVariant, checkpoint: Path | None, spec: EngineSpec,
                 settings: "Settings", log_dir: Path):
        self.name = variant.name
        self.base_url = variant.endpoint.rstrip("/")
        if not self.base_url.endswith("/v1"):
            self.base_url += "/v1"
        self.model = variant.served_model
        self.tokenizer = checkpoint
        self.api_key = None
        if variant.api_key_env:
            self.api_key = os.environ.get(variant.api_key_env)
            if not self.api_key:
                raise ConfigError(f"variant {variant.name!r}: environment variable {variant.api_key_env} "
                                  "(its API key) is not set")
        self._headers = bearer_headers(self.api_key)

    def start(self) -> Endpoint:
        try:
            r = httpx.get(self.base_url + "/models", timeout=10, headers=self._headers)
            r.raise_for_status()
            served = [m["id"] for m in r.json().get("data", [])]
        except (httpx.HTTPError, ValueError, KeyError) as e:
            raise EngineError(f"endpoint {self.base_url} does not answer /models: {e}", variant=self.name) from None
        model = self.model or (served[0] if served else None)
        if model is None or (self.model and self.model not in served):
            raise EngineError(f"endpoint {self.base_url} serves {served}, not {self.model!r}", variant=self.name)
        return Endpoint(base_url=self.base_url, model=model, tokenizer=self.tokenizer, engine=self.kind,
                        engine_version=self._version(), api_key=self.api_key, capabilities=self.capabilities)

    def _version(self) -> str:
        # vLLM's /version; other servers may have none, which is no reason to refuse them
        try:
            return str(httpx.get(self.base_url.removesuffix("/v1") + "/version", timeout=5,
                                 headers=self._headers).json().get("version", ""))
        except (httpx.HTTPError, ValueError, AttributeError):
            return ""

    def health(self) -> bool:
        try:
            return httpx.get(self.base_url + "/models", timeout=5, headers=self._headers).status_code == 200
        except httpx.HTTPError:
            return False

    def memory(self) -> EngineMemory:
        return EngineMemory()  # not ours to measure

    def stop(self, grace_s: float | None = None) -> None:
        pass  # not ours to stop

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
