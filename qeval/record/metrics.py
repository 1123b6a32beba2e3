"""What a metric is, declared where the metric is defined: 0/1 or continuous, and which way is better.

The statistics pick their test (McNemar and Newcombe for 0/1 scores, t and Wilcoxon otherwise) and the
gates their direction from this, never from the values one run happened to produce: all-zero KL
differences are not 0/1 data, and a name is not a declaration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import QevalError

if TYPE_CHECKING:
    import numpy as np


@dataclass(frozen=True)
class MetricSpec:
    binary: bool  # every item's score is 0 or 1 (a correct / wrong indicator)
    higher_is_better: bool | None  # None: the definition does not say (a gate rule must give `direction`)
    source: str = ""  # where it was declared, for error messages and the report
    # the figure of disagreement its comparison gives the noise floor (verdict/noise.py: "mean KL", "top-1
    # disagreement"); a 0/1 metric gives its flip rate undeclared, any other continuous score none
    floor_figure: str | None = None

    def check(self, suite: str, metric: str, *arrays: "np.ndarray") -> None:
        """A metric declared 0/1 whose scores are not is a wrong declaration: an error, not a silent switch."""
        import numpy as np  # here, not at import: a config error must not wait for numpy

        if self.binary and any(np.any((a != 0) & (a != 1)) for a in arrays):
            raise QevalError(f"suite {suite}: metric {metric!r} is declared 0/1 ({self.source}) but has scores "
                             "other than 0 and 1")


def continuous(higher_is_better: bool, source: str, floor_figure: str | None = None) -> MetricSpec:
    return MetricSpec(binary=False, higher_is_better=higher_is_better, source=source, floor_figure=floor_figure)


def indicator(source: str) -> MetricSpec:
    return MetricSpec(binary=True, higher_is_better=True, source=source)


UNDECLARED = MetricSpec(binary=False, higher_is_better=None, source="not declared")
