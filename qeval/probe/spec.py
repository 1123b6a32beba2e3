"""The latency probe and the batch-size x concurrency grid, as a campaign file states them."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from ..validation import Name, Strict, non_defaults


class ProbeSpec(Strict):
    """Latency probe against each variant's endpoint, after its suites (same server)."""

    enabled: bool = False
    concurrency: list[int] = Field([1, 2, 4, 8, 16], min_length=1)
    rates: list[float] = []  # requests per second, Poisson arrivals
    prompt_tokens: int = Field(128, gt=0)
    output_tokens: int = Field(64, gt=1)
    requests_per_step: int = Field(32, gt=0)
    min_rounds_per_step: int = Field(2, gt=0)  # at least this many requests per in-flight slot
    warmup_requests: int = Field(4, ge=0)
    # then warm-up rounds until output tok/s moves less than this fraction between two rounds (a GPU server's
    # first minutes can run 15-40% slower than its steady state); None: no rounds
    warmup_until_steady: float | None = Field(None, gt=0, lt=1)
    warmup_max_seconds: float = Field(90, gt=0)  # the rounds stop here, steady or not (the record says which)
    max_seconds_per_step: float = Field(120, gt=0)
    stop_after_saturation: bool = True
    # SLOs, e.g. {ttft_p95_ms: 1000, tpot_p95_ms: 100}: the report names the largest load meeting them
    slo: dict[str, float] = {}
    # per-request SLOs for goodput (requests/s meeting all of them), e.g. {ttft_ms: 500, tpot_ms: 50}
    goodput_slo: dict[str, float] = {}
    # probe a variant served on its dequantized weights (recipe.simulate) too: its speed is the dense model's, not
    # its scheme's, so by default it is not probed and its performance rules show nothing either way
    simulated: bool = False

    def key(self) -> dict[str, Any]:
        """What a stored probe is keyed by (with the variant's key): what this probe says beyond its defaults
        (whether simulated variants are probed says which variants are, not what a probe measures)."""
        return {k: x for k, x in non_defaults(self).items() if k != "simulated"}

    @field_validator("slo")
    @classmethod
    def _known_slo_keys(cls, v: dict[str, float]) -> dict[str, float]:
        allowed = {f"{m}_{s}_ms" for m in ("ttft", "tpot", "itl", "e2e") for s in ("mean", "p50", "p90", "p95", "p99")}
        bad = sorted(set(v) - allowed)
        if bad:
            raise ValueError(f"unknown SLO keys {bad}; use e.g. ttft_p95_ms, tpot_p99_ms")
        return v

    @field_validator("goodput_slo")
    @classmethod
    def _per_request_keys(cls, v: dict[str, float]) -> dict[str, float]:
        bad = sorted(set(v) - {"ttft_ms", "tpot_ms", "e2e_ms"})
        if bad or any(x <= 0 for x in v.values()):
            raise ValueError(f"goodput_slo takes positive ttft_ms / tpot_ms / e2e_ms (per request); got {sorted(v)}")
        return v


Positive = Annotated[int, Field(gt=0)]


class GridEngineSpec(Strict):
    """Engine settings a grid row changes, each one needing a server of its own; rows are their product."""

    max_num_seqs: list[Positive] = []
    max_num_batched_tokens: list[Positive] = []
    gpu_memory_utilization: list[Annotated[float, Field(gt=0, le=1)]] = []  # device: gpu only

    @model_validator(mode="after")
    def _some_setting(self) -> "GridEngineSpec":
        if not self.settings():
            raise ValueError("give at least one engine setting to vary, e.g. {max_num_seqs: [2, 8]}")
        for key, values in self.settings().items():
            if len(set(values)) != len(values):
                raise ValueError(f"{key}: a value is repeated in {values}")
        return self

    def settings(self) -> dict[str, list[float]]:
        """The settings given, in declaration order (the order rows are run and shown in)."""
        return {k: list(v) for k, v in self.model_dump().items() if v}


class GridSpec(Strict):
    """Batch size x concurrency: the probe at each client concurrency, on a server started with each
    engine setting (one start per variant and setting; a setting the variant already has runs on its
    evaluation server). Prompt and output lengths, warm-up and the SLOs come from `probe`."""

    variants: list[Name] | None = None  # default: every variant qeval serves itself
    engine: GridEngineSpec
    concurrency: list[Positive] = Field(min_length=1)
    requests_per_cell: int = Field(16, gt=0)
    max_seconds_per_cell: float = Field(60, gt=0)
    # over all the grid's variants: with max_seconds_per_cell, what bounds the grid's time
    max_cells: int = Field(24, gt=0, le=400)

    @field_validator("concurrency")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if len(set(v)) != len(v):
            raise ValueError(f"a concurrency is repeated in {v}")
        return v

    def rows(self) -> int:
        n = 1
        for values in self.engine.settings().values():
            n *= len(values)
        return n
