"""A third party's engine, scorer and suite kind, registered through entry points only (see the dist-info
beside it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx
from pydantic import Field

from qeval.engines import Endpoint, EngineBase, EngineMemory
from qeval.engines.spec import ServedEngineSpec
from qeval.hashing import stable_hash
from qeval.record.metrics import indicator
from qeval.record.store import Record
from qeval.suites.base import ItemSuite, Part, run_items
from qeval.suites.scorers import ScorerSpec
from qeval.suites.spec import SuiteRef


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


# -- a suite kind -------------------------------------------------------------------------------------------

class WordsRef(SuiteRef):
    """`kind: words`: n generated prompts; an answer scores 1 when it has at least `words` words."""

    kind: Literal["words"] = "words"
    name: str = "w"
    n: int = Field(12, gt=1)
    words: int = Field(1, ge=1)

    def resolve(self, settings, policy, config_file: str = "") -> "WordsSuite":
        return WordsSuite(name=self.name, n=self.n, words=self.words)


@dataclass(frozen=True)
class WordsSuite(ItemSuite):
    name: str
    n: int
    words: int

    @property
    def parts(self) -> tuple[Part, ...]:
        metrics = {"enough": indicator("the words suite")}
        return (Part(suite=f"words/{self.name}", key=f"words:{self.name}:{self.n}:{self.words}", metrics=metrics,
                     primary="enough", planned=("enough",)),)

    @property
    def concurrency(self) -> int:
        return 1

    def tally(self) -> dict[str, int]:
        return {"words suites": 1}

    def sizes(self, data_dir: Path) -> list:
        return [(self.parts[0].suite, "enough", self.n, ())]

    def run(self, run) -> None:
        (part,) = self.parts

        def evaluate(done: set[str], put) -> None:
            with httpx.Client(base_url=run.endpoint.base_url, timeout=run.timeout_s) as client:
                for i in range(self.n):
                    if str(i) in done:
                        continue
                    prompt = f"say something about {i}"
                    r = client.post("/completions", json={"model": run.endpoint.model, "prompt": prompt,
                                                          "max_tokens": 8, "temperature": 0})
                    text = r.json()["choices"][0]["text"]
                    put([Record(item_id=str(i), sample=0, scores={"enough": float(len(text.split()) >= self.words)},
                                prompt_hash=stable_hash(prompt), response=text)])

        run_items(run, part, [(str(i), None) for i in range(self.n)], evaluate)
