"""A fake engine for fast tests (inspect_ai's mockllm): a real local server, deterministic, with faults.

It is driven exactly as vLLM is (VllmEngine's start, health, watchdog, stop), so orchestration tests run
qeval's own lifecycle code; only the server differs: engines/fake_server.py, started as a subprocess in
its own process group. A subprocess, not a thread: the fault "dies" is then a process that exits, seen
the way a crashed vLLM is, and the watchdog's kill and stop()'s group kill act on a real process tree.

What the fake answers is set by its "checkpoint": a folder whose config.json holds a FakeEngineSpec under
`qeval_fake` (write_checkpoint makes one). The campaign file's engine block stays EngineSpec's (kind
fake), so that the fake's own fields need nothing of config.py; like a model's weights, the folder
decides the answers, and its content hash keys the results.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import ConfigError, MissingEnvError
from ..settings import Runtime
from .base import EngineMemory
from .capabilities import ECHO_LOGPROBS, Capabilities
from .capacity import Capacity
from .registry import ENGINES
from .spec import VllmSpec
from .vllm import METRICS, VllmEngine, vllm_progress
from .watchdog import Watchdog

if TYPE_CHECKING:
    from ..settings import Settings
    from .base import ServedVariant
    from .spec import EngineSpec

SERVER = Path(__file__).with_name("fake_server.py")
SPEC_KEY = "qeval_fake"  # the config.json entry that holds a fake checkpoint's FakeEngineSpec
RUNTIME_NAME = "qeval-fake-1"


class FakeEngineSpec(BaseModel):
    """What a fake engine answers and which faults it plays (the `kind: fake` engine's own fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = "fake"  # its identity: answers and logprobs are functions of (model, prompt, settings)
    # custom suites' item files (JSONL; relative: to the checkpoint folder): their prompts get their reference
    answers: list[Path] = []
    wrong: list[str] = []  # item ids it answers wrong
    wrong_fraction: float = Field(0.0, ge=0, le=1)  # and this share of the others, chosen by a hash of (model, id)
    # and this share, chosen by a hash of (served name, id): each server of the checkpoint errs on its own
    # items, as an engine whose results depend on its batch (what the noise floor measures: qeval/verdict/noise.py)
    server_noise: float = Field(0.0, ge=0, le=1)
    logprob_noise: float = Field(0.0, ge=0)  # how far its next-token distributions sit from the reference ones
    token_delay_s: float = Field(0.0, ge=0)  # between streamed tokens
    # a server that warms up: its first generation runs `cold_factor` times slower, and the slowdown falls
    # linearly to none over `cold_requests` generations
    cold_requests: int = Field(0, ge=0)
    cold_factor: float = Field(1.0, ge=1)
    quantize_s: float = Field(0.0, ge=0)  # how long the fake quantizer (quantize/fake.py) takes to make a variant of it
    start_delay_s: float = Field(0.0, ge=0)  # it sleeps this long before it listens, at every start
    dies_after: int | None = Field(None, ge=0)  # the server exits once it has answered this many requests
    hangs_after: int | None = Field(None, ge=0)  # it stops answering anything, /health too, after this many
    fault_starts: list[int] = [1]  # the starts (1: the first) that play dies_after / hangs_after
    # a local fake answers /health at once: its watchdog can look often and give up soon
    watchdog_interval_s: float = Field(0.2, gt=0)
    watchdog_timeout_s: float = Field(1.0, gt=0)
    # the KV cache it says it holds once up (as vLLM's log does), for tests of suites sized from it and of the KV
    # capacity a variant gains (served with an FP8 KV cache it holds twice as many, as vLLM's does in the same
    # memory); None: it cannot say, as an external endpoint
    kv_cache_tokens: int | None = Field(None, gt=0)
    # a needle prompt (suites/needle.py) is answered with its needle's value where the needle lies within this
    # many tokens of the prompt's end, else with a wrong one; None: found at any distance
    needle_reach: int | None = Field(None, ge=0)


def read_spec(checkpoint: Path) -> FakeEngineSpec:
    """The checkpoint's FakeEngineSpec; a folder without one is a fake with the defaults."""
    file = checkpoint / "config.json"
    try:
        data = json.loads(file.read_text()).get(SPEC_KEY, {}) if file.is_file() else {}
        spec = FakeEngineSpec.model_validate(data)
    except (OSError, ValueError, AttributeError) as e:
        first = e.errors()[0] if isinstance(e, ValidationError) else None
        where = ".".join([SPEC_KEY, *(str(x) for x in first["loc"])]) if first else SPEC_KEY
        raise ConfigError(first["msg"] if first else f"not a fake checkpoint config: {e}", file=str(file),
                          where=where) from None
    return spec.model_copy(update={"answers": [p if p.is_absolute() else checkpoint / p for p in spec.answers]})


def write_checkpoint(folder: Path, spec: FakeEngineSpec | None = None) -> Path:
    """A fake checkpoint: a folder with a config.json that holds `spec`."""
    folder.mkdir(parents=True, exist_ok=True)
    body = {"model_type": "qeval-fake", SPEC_KEY: (spec or FakeEngineSpec()).model_dump(mode="json")}
    (folder / "config.json").write_text(json.dumps(body, indent=1))
    return folder


class FakeSpec(VllmSpec):
    """`engine: {kind: fake}`: vLLM's settings (the fake is served and watched as vLLM is); what it answers
    and its faults are in its checkpoint (FakeEngineSpec), so one campaign can hold fakes that differ."""

    kind: Literal["fake"] = "fake"  # type: ignore[assignment]


@ENGINES.register("fake")
class FakeEngine(VllmEngine):
    kind = "fake"
    Spec = FakeSpec
    test_double = True  # a stand-in for qeval's own tests: `qeval doctor` shows it apart from what a user serves
    # echo prompt logprobs with alternatives, vLLM's /metrics names; no tokenizer a client could load (so no
    # lm-eval), but its /tokenize gives out ids that its completions take back
    capabilities = Capabilities(prompt_logprobs=ECHO_LOGPROBS, token_prompts=False, metrics=(METRICS,),
                                memory=("rss_bytes", "kv_cache_tokens"))
    health_poll_s = 0.02

    def __init__(self, *, variant: "ServedVariant", checkpoint: Path | None, spec: "EngineSpec",
                 settings: "Settings", log_dir: Path):
        super().__init__(variant=variant, checkpoint=checkpoint, spec=spec, settings=settings, log_dir=log_dir)
        self.fake = read_spec(self.checkpoint)
        self.starts = 0  # faults play on the starts fault_starts names: a restart can then succeed

    @staticmethod
    def no_kernel(spec: object, variant: object, cpu: object = None) -> str | None:
        return None  # it computes nothing: every scheme, on every CPU kind (orchestration tests are kind-blind)

    @staticmethod
    def serve_dtypes(method: str, device: str, checkpoint: Path | None = None, cpu: object = None) -> frozenset[str] | None:
        return None  # it computes nothing: any dtype

    @staticmethod
    def default_runtime(settings: "Settings") -> Runtime:
        return Runtime(RUNTIME_NAME, Path(sys.executable))

    def missing_runtime(self) -> MissingEnvError:
        return MissingEnvError("the Python that runs qeval", str(self.runtime.python))

    @property
    def tokenizer(self) -> None:
        return None  # text prompts only

    def kv_tokens(self) -> int | None:
        """The tokens its KV cache holds: its FakeEngineSpec's, twice that with an FP8 KV cache (half the bytes a
        token)."""
        n = self.fake.kv_cache_tokens
        return None if n is None else n * (2 if self.spec.kv_cache_dtype.startswith("fp8") else 1)

    def capacity(self) -> Capacity | None:
        if self.kv_tokens() is None:
            return None
        return Capacity(kv_tokens=self.kv_tokens(), max_num_seqs=self.spec.max_num_seqs or 128)

    def memory(self) -> EngineMemory:
        return dataclasses.replace(super().memory(), kv_cache_tokens=self.kv_tokens())

    def start(self):
        self.starts += 1
        return super().start()

    def server_config(self) -> dict:
        """What the server process gets: the spec, with the faults only on the starts that play them."""
        cfg = {**self.fake.model_dump(mode="json"), "max_model_len": self.spec.max_model_len}
        if self.starts not in self.fake.fault_starts:
            cfg.update(dies_after=None, hangs_after=None)
        return cfg

    def argv(self, port: int) -> list[str]:
        # by path, isolated, without site-packages: the script needs the standard library only (a fast start)
        return [str(self.runtime.python), "-I", "-S", str(SERVER), "--host", self.spec.host, "--port", str(port),
                "--served-model-name", self.name, "--config", json.dumps(self.server_config())]

    def _env(self) -> dict[str, str]:
        return self.runtime.env(os.environ)

    def _watchdog(self, base: str) -> Watchdog:
        return Watchdog(base, self._hung, stall_s=self.spec.request_timeout_s, progress=vllm_progress,
                        interval_s=self.fake.watchdog_interval_s, health_timeout_s=self.fake.watchdog_timeout_s)
