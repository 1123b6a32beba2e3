"""A third party's engine and scorer, registered through entry points only (see the dist-info beside it)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from qeval.engines import Endpoint, EngineBase, EngineMemory
from qeval.engines.spec import ServedEngineSpec
from qeval.suites.spec import ScorerSpec


class EchoSpec(ServedEngineSpec):
    kind: Literal["echo"] = "echo"
    answer: str = "42"  # what every request is answered with


class EchoEngine(EngineBase):
    """Serves nothing: enough to show that a campaign names it, validates its settings and builds it."""

    kind = "echo"
    Spec = EchoSpec

    def __init__(self, *, variant, checkpoint: Path | None, spec: EchoSpec, settings, log_dir: Path):
        self.name, self.spec = variant.name, spec
        self.log_path = log_dir / f"engine-{variant.name}.log"

    def start(self) -> Endpoint:
        return Endpoint(base_url="http://127.0.0.1:9/v1", model=self.name, tokenizer=None, engine=self.kind)

    def health(self) -> bool:
        return False

    def memory(self) -> EngineMemory:
        return EngineMemory()

    def stop(self, grace_s: float | None = None) -> None:
        pass

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ConstantSpec(ScorerSpec):
    value: float = Field(1.0, ge=0, le=1)


class _Constant:
    binary = False

    def __init__(self, name: str, value: float):
        self.name, self.value = name, value

    def __call__(self, response: str, reference) -> float:
        return self.value


def constant(spec: ConstantSpec) -> _Constant:
    return _Constant(spec.name or "constant", spec.value)


constant.Spec = ConstantSpec
