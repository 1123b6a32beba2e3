"""The engine contract: a context manager that starts a server and never lets it outlive its caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..registry import Registry

if TYPE_CHECKING:
    from ..settings import Settings
    from .spec import EngineSpec


@dataclass(frozen=True)
class Endpoint:
    """Where a variant answers: everything downstream talks to this over the OpenAI HTTP API."""

    base_url: str  # ends in /v1
    model: str  # the name the server expects in requests
    tokenizer: Path | None  # a local tokenizer folder (lm-eval counts tokens with it)
    engine: str
    engine_version: str = ""
    info: dict[str, str] = field(default_factory=dict)
    # read from the environment at start; never printed (repr=False), logged or recorded
    api_key: str | None = field(default=None, repr=False)
    # False where /v1/completions cannot return the prompt's own logprobs (echo + logprobs): loglikelihood
    # tasks and distribution probes would be scored wrong there, so they are refused, never run
    prompt_logprobs: bool = True

    @property
    def headers(self) -> dict[str, str]:
        return bearer_headers(self.api_key)


def bearer_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


@dataclass(frozen=True)
class EngineMemory:
    rss_bytes: int | None = None  # the engine's process tree, on the CPU
    gpu_bytes: int | None = None  # through NVML, on a GPU
    kv_cache_bytes: int | None = None  # as the engine reports it
    kv_cache_tokens: int | None = None
    model_bytes: int | None = None  # the weights as loaded on the device, as the engine reports it


class ServedVariant(Protocol):
    """What an engine reads of the variant it serves (a campaign's VariantSpec is one)."""

    name: str
    endpoint: str | None  # an external endpoint's URL
    served_model: str | None  # the model name that endpoint expects
    api_key_env: str | None  # the NAME of a variable holding its key


@runtime_checkable
class Engine(Protocol):
    name: str

    def start(self) -> Endpoint: ...

    def health(self) -> bool: ...

    def memory(self) -> EngineMemory: ...

    def stop(self, grace_s: float | None = None) -> None:
        """End the server: SIGTERM, then SIGKILL after grace_s (None: the engine's own grace)."""
        ...

    def __enter__(self) -> Endpoint: ...

    def __exit__(self, *exc: object) -> None: ...


ENGINES: Registry = Registry("engine", entry_point_group="qeval.engines")


def serve_dtypes(kind: str, method: str, device: str, checkpoint: Path | None = None) -> frozenset[str] | None:
    """The dtypes an engine kind can serve a method (or a checkpoint given as is) in, as the engine declares
    it (None: any)."""
    declared = getattr(ENGINES.get(kind), "serve_dtypes", None)
    return declared(method, device, checkpoint) if declared else None


def build_engine(kind: str, variant: ServedVariant, checkpoint: Path | None, spec: "EngineSpec",
                 settings: "Settings", log_dir: Path) -> Engine:
    return ENGINES.get(kind)(variant=variant, checkpoint=checkpoint, spec=spec, settings=settings, log_dir=log_dir)
