"""The engine contract: a context manager that starts a server and never lets it outlive its caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from ..registry import Registry
from .capabilities import Capabilities, MetricNames

if TYPE_CHECKING:
    from ..hardware import CpuInfo
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
    # what the engine serving it can do (engines pass their own); None: the registered `engine` kind's
    capabilities: Capabilities = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.capabilities is None:  # an Endpoint built by hand (a test, a notebook) names its engine kind
            object.__setattr__(self, "capabilities", getattr(ENGINES.get(self.engine), "capabilities", Capabilities()))

    @property
    def headers(self) -> dict[str, str]:
        return bearer_headers(self.api_key)

    @property
    def prompt_logprobs(self) -> bool:
        """False where the engine cannot return the prompt's own logprobs: loglikelihood tasks and
        distribution probes would be scored wrong there, so they are refused, never run."""
        return self.capabilities.prompt_logprobs is not None


def bearer_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def tls_verify(url: str) -> bool:
    """httpx's `verify` for a client of `url`: plain http has no TLS to verify, and httpx's default
    context reads the whole CA bundle (~40 ms for every client made)."""
    return not url.startswith("http://")


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
    """Every engine's lifecycle. `build_engine` constructs it with keyword arguments only (see __init__);
    nothing runs until `start()`, and `stop()` (or leaving the `with` block) ends whatever start began.
    After a fault the same object is started again (a restart): `start()` after `stop()` must work.
    Optional: a static `serve_dtypes(method, device, checkpoint, cpu)` (see serve_dtypes below); `test_double =
    True` on a stand-in for tests (the fake engine), which `qeval doctor` then lists apart, not as runnable."""

    kind: ClassVar[str]  # its registry name, and what its Endpoint says served it
    capabilities: ClassVar[Capabilities]
    name: str  # the variant's name
    log_path: Path | None  # its server's log (None: no server of qeval's)
    startup_seconds: float | None  # the last start, spawn to healthy (None: not measured)

    def __init__(self, *, variant: "VariantSpec", checkpoint: Path | None, spec: "EngineSpec",
                 settings: "Settings", log_dir: Path) -> None: ...

    def start(self) -> Endpoint:
        """Returns once the server answers; any failure (or Ctrl-C) on the way stops what it started."""
        ...

    def health(self) -> bool:
        """Answers now (False once stopped, dead, or found hung)."""
        ...

    def memory(self) -> EngineMemory:
        """What it uses, as far as it can tell (capabilities.memory names the fields it fills)."""
        ...

    def stop(self, grace_s: float | None = None) -> None:
        """End the server: SIGTERM, then SIGKILL after grace_s (None: the engine's own grace). Idempotent."""
        ...

    @property
    def hung(self) -> str | None:
        """Why its watchdog judged the server hung (and ended it) in the last start, or None."""
        ...

    def __enter__(self) -> Endpoint: ...

    def __exit__(self, *exc: object) -> None: ...


ENGINES: Registry = Registry("engine", entry_point_group="qeval.engines")


def serve_dtypes(kind: str, method: str, device: str, checkpoint: Path | None = None,
                 cpu: "CpuInfo | None" = None) -> frozenset[str] | None:
    """The dtypes an engine kind can serve a method (or a checkpoint given as is) in on this machine's CPU, as
    the engine declares it (None: any)."""
    declared = getattr(ENGINES.get(kind), "serve_dtypes", None)
    return declared(method, device, checkpoint, cpu) if declared else None


def known_metric_names() -> tuple[MetricNames, ...]:
    """Every registered engine's /metrics name tables, each once: what a server of unknown kind may follow."""
    out: list[MetricNames] = []
    for kind in ENGINES.names():
        for table in getattr(ENGINES.get(kind), "capabilities", Capabilities()).metrics or ():
            if table not in out:
                out.append(table)
    return tuple(out)


def build_engine(kind: str, variant: ServedVariant, checkpoint: Path | None, spec: "EngineSpec",
                 settings: "Settings", log_dir: Path) -> Engine:
    return ENGINES.get(kind)(variant=variant, checkpoint=checkpoint, spec=spec, settings=settings, log_dir=log_dir)
