"""What an imported metric is: 0/1 or continuous, and which way is better. Declared, never inferred.

The evaluator's own declaration comes first (lm-eval's `higher_is_better`, inspect's built-in scorers); a
comparison file's `metrics:` section declares the rest; a gate rule's `direction` gives a direction only. Two
sources that say different things are refused naming both, and a gated metric that no source declares fully is
refused before any statistics, with the `metrics:` lines to add.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import TYPE_CHECKING, Sequence

from ..errors import ConfigError
from ..record.metrics import MetricSpec
from ..verdict.rules import direction_of_spec, gated_metrics
from .base import BadResults, ImportedTask

if TYPE_CHECKING:
    from ..verdict.policy import GatePolicy


@dataclass(frozen=True)
class Declaration:
    """One entry of a `metrics:` section."""

    match: str  # glob over "suite/metric"
    binary: bool
    higher_is_better: bool | None
    source: str  # "metrics[2] in FILE"


def _kind(binary: bool) -> str:
    return "binary" if binary else "continuous"


def resolve(suite: str, metrics: Sequence[str], evaluator: dict[str, MetricSpec],
            user: Sequence[Declaration], file: str = "") -> dict[str, MetricSpec]:
    """Each metric's declaration: the evaluator's, completed or restated by the last `metrics:` entry that matches it;
    a contradiction between the two is refused naming both."""
    out = dict(evaluator)
    for m in metrics:
        hits = [d for d in user if fnmatchcase(f"{suite}/{m}", d.match)]
        if not hits:
            continue
        d = hits[-1]
        own = evaluator.get(m)
        if own is None:
            out[m] = MetricSpec(binary=d.binary, higher_is_better=d.higher_is_better, source=d.source)
            continue
        if own.binary != d.binary or (d.higher_is_better is not None and own.higher_is_better is not None
                                      and own.higher_is_better != d.higher_is_better):
            raise ConfigError(f"{suite}/{m} is declared {_kind(d.binary)}, higher_is_better: {d.higher_is_better} "
                              f"({d.source}), and {_kind(own.binary)}, higher_is_better: {own.higher_is_better} "
                              f"({own.source}): remove one", file=file, where="metrics")
        if own.higher_is_better is None and d.higher_is_better is not None:
            out[m] = MetricSpec(binary=own.binary, higher_is_better=d.higher_is_better,
                                source=f"{own.source}; direction: {d.source}")
    return out


def check_partial(task: ImportedTask, declared: dict[str, MetricSpec]) -> None:
    """A score with partial credit (inspect's P, read as 0.5) is compared only where a declaration says the metric is
    continuous: 0.5 is not a value of a 0/1 metric, and an undeclared one is not assumed either way."""
    for m, where in sorted(task.partial.items()):
        spec = declared.get(m)
        if spec is None or spec.binary:
            said = "is not declared" if spec is None else f"is declared 0/1 ({spec.source})"
            raise BadResults(f"{task.suite}: metric {m!r} has partial credit (P) but {said}: declare it continuous "
                             f"to compare it with P as 0.5 (metrics: - {{match: \"{task.suite}/{m}\", type: "
                             "continuous, higher_is_better: true}})", file=task.file, where=where.partition(":")[2])


def undeclared_gated(policy: "GatePolicy", task: ImportedTask, declared: dict[str, MetricSpec],
                     primary: str | None) -> list[str]:
    """The task's gated metrics whose type or direction no source declares."""
    metrics = sorted({m for r in task.records for m in r.scores}, key=lambda m: (m != primary, m))
    out = []
    for m, rule in gated_metrics(policy, task.suite, metrics, primary):
        spec = declared.get(m)
        if spec is None or direction_of_spec(rule, spec) is None:
            out.append(f"{task.suite}/{m}")
    return out


def snippet(names: Sequence[str]) -> str:
    """The `metrics:` lines a comparison file needs for these metrics, each type and direction left to choose."""
    lines = ["metrics:  # choose each: binary (every score 0 or 1) or continuous; true where higher is better"]
    lines += [f'  - {{match: "{n}", type: binary|continuous, higher_is_better: true|false}}' for n in names]
    return "\n".join(lines)


def refuse_undeclared(names: Sequence[str], file: str = "") -> None:
    if names:
        raise ConfigError(f"gated metrics with no declaration of what they are: {', '.join(names)}. qeval does not "
                          "infer a metric's type or direction from its values; declare them in the comparison file "
                          "(or --metrics FILE):\n" + snippet(names), file=file, where="metrics")
