"""The noise floor (A/A): the baseline evaluated a second time, by a second server under another batch shape,
and compared with its first evaluation. What differs between the two is the engine's own noise (batch
composition changes the order of floating-point sums: vLLM is not batch-invariant unless asked to be), so a
variant whose disagreement with the baseline is no larger than this floor differs by no more than that noise.

Pure: the spec, and the figures read from comparisons already made (comparison.py).
"""

from __future__ import annotations

from typing import Any, Mapping

from pydantic import Field, model_validator

from ..record.run import Comparison
from ..record.measurements import FloorFigure, FloorNote
from ..validation import Strict

SUFFIX = "-aa"  # the A/A evaluation's name: the baseline's, with this after it


class NoiseFloorSpec(Strict):
    """`noise_floor: true`, or its settings."""

    enabled: bool = False
    # requests in flight for every suite of the second evaluation; None: one at a time, unless every suite
    # already runs one at a time, then 8 (another batch shape either way)
    concurrency: int | None = Field(None, gt=0, le=1024)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v

    def shape(self, suite_concurrency: list[int]) -> int:
        """The second evaluation's requests in flight, given those of the campaign's suites."""
        if self.concurrency is not None:
            return self.concurrency
        return 8 if suite_concurrency and all(c == 1 for c in suite_concurrency) else 1


# how each figure of disagreement reads a comparison (a metric declares which one it gives: record/metrics.py)
FIGURES = {"flip rate": lambda c: c.flip_rate, "mean KL": lambda c: c.variant_mean,
           "top-1 disagreement": lambda c: 1.0 - c.variant_mean}


def figure_of(c: Comparison, declared: str | None = None) -> tuple[str, float] | None:
    """What a comparison says of disagreement: a 0/1 metric's flip rate, or the figure its metric declares
    (a corpus's mean KL, its top-1 disagreement); None for the rest (a continuous score's delta is not a
    disagreement figure)."""
    if c.binary and c.flip_rate is not None:
        return "flip rate", c.flip_rate
    if declared in FIGURES and declared != "flip rate":
        return declared, FIGURES[declared](c)
    return None


def floor_figures(aa: list[Comparison], declared: Mapping[tuple[str, str], str | None]) -> list[FloorFigure]:
    """The A/A's figures; `declared`: per (suite, metric), the figure its metric declares."""
    out = []
    for c in aa:
        f = figure_of(c, declared.get((c.suite, c.metric)))
        if f is not None:
            out.append(FloorFigure(suite=c.suite, metric=c.metric, figure=f[0], value=f[1], n=c.n_paired))
    return out


def within_floor(comparisons: list[Comparison], figures: list[FloorFigure]) -> list[FloorNote]:
    """Every variant's (suite, metric) whose disagreement with the baseline is no larger than the A/A's there:
    the variant differs from the baseline by no more than the baseline differs from itself (point figures)."""
    floor = {(f.suite, f.metric): f for f in figures}
    out = []
    for c in comparisons:
        f = floor.get((c.suite, c.metric))
        fig = figure_of(c, f.figure) if f is not None else None
        # no disagreement at all has nothing to explain; above the floor, more than the engine's noise
        if f is not None and fig is not None and 0 < fig[1] <= f.value:
            out.append(FloorNote(variant=c.variant, suite=c.suite, metric=c.metric, figure=fig[0], value=fig[1],
                                 floor=f.value))
    return out


def show(figure: str, value: float | None) -> str:
    """A disagreement figure as the report writes it: rates in percent, KL as is."""
    if value is None:
        return "-"
    return f"{value:.4f}" if figure == "mean KL" else f"{100 * value:.1f}%"


def floor_rows(figures: list[FloorFigure], comparisons: list[Comparison], within: list[FloorNote],
               variants: list[str]) -> list[tuple[FloorFigure, list[str]]]:
    """The report's table: each floor figure, then each variant's figure on that (suite, metric), marked
    where it sits within the floor."""
    inside = {(n.variant, n.suite, n.metric) for n in within}
    seen = {(c.variant, c.suite, c.metric): c for c in comparisons}
    out = []
    for f in figures:
        cells = []
        for v in variants:
            c = seen.get((v, f.suite, f.metric))
            fig = figure_of(c, f.figure) if c is not None else None
            mark = " (within)" if (v, f.suite, f.metric) in inside else ""
            cells.append(show(f.figure, fig[1] if fig else None) + mark)
        out.append((f, cells))
    return out
