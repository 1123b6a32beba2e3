"""The engine contract: a context manager that starts a server and never lets it outlive its caller."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Protocol, runtime_checkable

from .capabilities import Capabilities, MetricNames
from .capacity import Capacity
from .registry import ENGINES
from .spec import EngineSpec, ServedEngineSpec

if TYPE_CHECKING:
    from ..machine.hardware import CpuInfo
    from ..settings import Runtime, Settings


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
            object.__setattr__(self, "capabilities", ENGINES.get(self.engine).capabilities)

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
    """Every engine's lifecycle, and what the pipeline asks an engine kind before it builds one. `build_engine`
    constructs it with keyword arguments only (see __init__); nothing runs until `start()`, and `stop()` (or
    leaving the `with` block) ends whatever start began. After a fault the same object is started again (a
    restart): `start()` after `stop()` must work. EngineBase gives every member a plugin may leave out its
    default: an engine class subclasses it."""

    kind: ClassVar[str]  # its registry name, and what its Endpoint says served it
    label: ClassVar[str]  # how messages name it ("vLLM")
    Spec: ClassVar[type[EngineSpec]]  # its settings (engine: {kind: ...} in a campaign file)
    capabilities: ClassVar[Capabilities]
    # a stand-in for tests (the fake engine): `qeval doctor` lists it apart, not as runnable
    test_double: ClassVar[bool]
    name: str  # the variant's name
    log_path: Path | None  # its server's log (None: no server of qeval's)
    startup_seconds: float | None  # the last start, spawn to healthy (None: not measured)

    def __init__(self, *, variant: ServedVariant, checkpoint: Path | None, spec: EngineSpec,
                 settings: "Settings", log_dir: Path) -> None: ...

    @staticmethod
    def default_runtime(settings: "Settings") -> "Runtime":
        """The installed runtime it runs in (its name is part of every key it serves under)."""
        ...

    @staticmethod
    def no_kernel(spec: EngineSpec, variant: ServedVariant, cpu: "CpuInfo | None" = None) -> str | None:
        """Why it has no kernel for the variant's scheme on this machine (it is then served on its dequantized
        weights where the recipe says simulate: auto), or None."""
        ...

    @staticmethod
    def check_plan(spec: EngineSpec, variant: ServedVariant, probe: object,
                   cpu: "CpuInfo | None" = None) -> tuple[str, str] | None:
        """What a campaign asks of it that it cannot do, as (message, where in the variant), or None."""
        ...

    @staticmethod
    def serve_dtypes(method: str, device: str, checkpoint: Path | None = None,
                     cpu: "CpuInfo | None" = None) -> frozenset[str] | None:
        """The dtypes it can serve a method (or a checkpoint given as is) in on this machine's CPU (None: any)."""
        ...

    def start(self) -> Endpoint:
        """Returns once the server answers; any failure (or Ctrl-C) on the way stops what it started."""
        ...

    def health(self) -> bool:
        """Answers now (False once stopped, dead, or found hung)."""
        ...

    def memory(self) -> EngineMemory:
        """What it uses, as far as it can tell (capabilities.memory names the fields it fills)."""
        ...

    def capacity(self) -> Capacity | None:
        """What the running server holds at once (its KV cache, its max_num_seqs), read once it is up; None where
        it cannot say (an external endpoint): suites set to `auto` then keep their own number."""
        ...

    def stop(self, grace_s: float | None = None) -> None:
        """End the server: SIGTERM, then SIGKILL after grace_s (None: the engine's own grace). Idempotent."""
        ...

    @property
    def hung(self) -> str | None:
        """Why its watchdog judged the server hung (and ended it) in the last start, or None."""
        ...

    def __enter__(self) -> Endpoint: ...

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None: ...


class EngineBase:
    """The defaults of what an engine may leave out; every engine class subclasses it (the registry refuses a
    plugin's that does not), so the pipeline asks any engine directly. An engine still writes __init__, start, health,
    memory and stop."""

    kind: ClassVar[str]
    label: ClassVar[str] = ""  # set to the kind where neither it nor a base class names one
    Spec: ClassVar[type[EngineSpec]] = ServedEngineSpec
    capabilities: ClassVar[Capabilities] = Capabilities()
    test_double: ClassVar[bool] = False
    log_path: Path | None = None
    startup_seconds: float | None = None
    hung: str | None = None  # no watchdog of its own: never judged hung

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.label and "kind" in vars(cls):
            cls.label = cls.kind

    @staticmethod
    def default_runtime(settings: "Settings") -> "Runtime":
        return settings.vllm

    @staticmethod
    def no_kernel(spec: EngineSpec, variant: ServedVariant, cpu: "CpuInfo | None" = None) -> str | None:
        return None

    @staticmethod
    def check_plan(spec: EngineSpec, variant: ServedVariant, probe: object,
                   cpu: "CpuInfo | None" = None) -> tuple[str, str] | None:
        return None

    @staticmethod
    def serve_dtypes(method: str, device: str, checkpoint: Path | None = None,
                     cpu: "CpuInfo | None" = None) -> frozenset[str] | None:
        return None

    def start(self) -> Endpoint:
        raise NotImplementedError

    def capacity(self) -> Capacity | None:
        return None

    def stop(self, grace_s: float | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.stop()


def serve_dtypes(kind: str, method: str, device: str, checkpoint: Path | None = None,
                 cpu: "CpuInfo | None" = None) -> frozenset[str] | None:
    """The dtypes an engine kind can serve a method (or a checkpoint given as is) in on this machine's CPU, as
    the engine declares it (None: any)."""
    return ENGINES.get(kind).serve_dtypes(method, device, checkpoint, cpu)


def known_metric_names() -> tuple[MetricNames, ...]:
    """Every registered engine's /metrics name tables, each once: what a server of unknown kind may follow."""
    out: list[MetricNames] = []
    for kind in ENGINES.names():
        for table in ENGINES.get(kind).capabilities.metrics or ():
            if table not in out:
                out.append(table)
    return tuple(out)


def build_engine(kind: str, variant: ServedVariant, checkpoint: Path | None, spec: "EngineSpec",
                 settings: "Settings", log_dir: Path) -> Engine:
    return ENGINES.get(kind)(variant=variant, checkpoint=checkpoint, spec=spec, settings=settings, log_dir=log_dir)
