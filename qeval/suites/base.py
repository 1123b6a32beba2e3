"""The suite seam: what a campaign's `suites:` entry becomes once resolved, and all the pipeline asks of it.

A Suite is one entry (a custom suite, an lm-eval suite of tasks, a logprobs corpus, or a kind a plugin
registers); its Parts are what is stored, paired and gated as one (an lm-eval suite has a part per task).
Before any engine starts, each kind checks what its suites need on this machine (`preflight`).
A variant's run hands each suite a SuiteRun (the endpoint, the variant's records, the looks of its
sequential gates) and the suite evaluates what is missing; the verdict pairs each part through the suite's
`views`. Nothing outside suites/ knows a suite's kind.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

from ..record.metrics import MetricSpec
from ..record.store import Record

if TYPE_CHECKING:
    from ..engines import Endpoint
    from ..engines.capacity import Capacity
    from ..record.measurements import BaselineDistribution, Distribution, FlipRow, Strata, SuiteFlips
    from ..settings import Settings
    from ..verdict.pairing import Paired


@dataclass(frozen=True)
class Part:
    """What is stored, paired and gated as one: a custom suite, an lm-eval task, a logprobs corpus."""

    suite: str  # its name in records, gates and reports: "custom/capitals", "lm_eval/oe_sciq", "logprobs/pydoc"
    key: str  # the store's key
    metrics: Mapping[str, MetricSpec]  # what each metric is, as the suite declares it
    primary: str | None = None  # the metric its summary leads with (None: the first its records carry)
    # the metrics its gates read, where fixed by the suite (a logprobs corpus: KL and top-1 against the
    # baseline); None: those its records carry
    gated: tuple[str, ...] | None = None
    gated_primary: str | None = None  # the metric a gate reads unless a rule names another (None: `primary`)
    planned: tuple[str, ...] = ()  # the metrics known before any record is made (what the plan checks)
    grouped: bool = False  # its items carry groups (clustered statistics; no betting sequence)
    # what it asks of an engine: prompt logprobs (scored from the logprobs of given text), token-id prompts
    needs_prompt_logprobs: bool = False
    needs_token_prompts: bool = False
    # the engine's tokenize route: its own token ids of a text, taken back as a prompt (a length exact in tokens)
    needs_tokenize: bool = False

    @property
    def gate_metric(self) -> str | None:
        return self.gated_primary or self.primary


@dataclass(frozen=True)
class Looks:
    """What a sequential gate's looks read besides the pairs: every planned item in the baseline's records
    (the evaluation order is drawn over them, seeded by the part's key) and the baseline's mean of each
    metric (what a relative margin is relative to)."""

    ids: tuple[str, ...]
    groups: tuple[str | None, ...]
    base_means: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class View:
    """One pairing of a part's records, variant against baseline, for the verdict."""

    paired: "Paired"
    primary: str | None  # the comparison marked primary (None: none of this view's)
    metrics: tuple[str, ...] | None = None  # compared, in this order (None: every paired metric, sorted)
    looks: Looks | None = None  # None: no gate of this view looks while its suite runs
    # metric -> why its data are too few to judge (a depth bucket few documents reach): its gate is
    # INCONCLUSIVE whatever its interval says, never PASS
    insufficient: Mapping[str, str] = field(default_factory=dict)

    @property
    def compared(self) -> tuple[str, ...]:
        return self.metrics if self.metrics is not None else tuple(sorted(self.paired.base))


@dataclass(frozen=True)
class Pairing:
    """Everything a part's records say against the baseline's, before any statistics: the views the verdict
    compares, the items whose 0/1 result flipped (the record's few, and every row), and per-token figures
    (variant, baseline) where the suite has them."""

    views: tuple[View, ...]
    flips: "tuple[SuiteFlips, list[FlipRow]] | None" = None
    distribution: "tuple[Distribution, BaselineDistribution] | None" = None
    strata: "Strata | None" = None  # the figures per stratum (depth bucket) where the suite has them


@dataclass(frozen=True)
class Checked:
    """What a suite kind's pre-flight found: its suites as their data is on this machine (in the order given; an
    lm-eval suite's batched tasks with the docs their data has), and the line `qeval validate` says of it
    (None: nothing to say)."""

    suites: tuple["Suite", ...]
    summary: str | None = None


class Preflight(Protocol):
    """A suite kind's check of what its suites need on this machine, under way while the campaign is checked."""

    def result(self) -> Checked:
        """Wait for it: bad input (a task whose data does not load) raises ConfigError, what is not on this
        machine MissingEnvError."""
        ...

    def close(self) -> None:
        """Stop what it started, whatever happened."""
        ...


@dataclass(frozen=True)
class Nothing:
    """The pre-flight of a kind with nothing to check before its suites run: its suites as they are."""

    checked: Checked

    def result(self) -> Checked:
        return self.checked

    def close(self) -> None:
        pass


def nothing_to_check(suites: Sequence["Suite"], settings: "Settings", config_file: str = "",
                     runs_here: bool = True) -> Nothing:
    return Nothing(Checked(tuple(suites)))


@runtime_checkable
class SuiteRun(Protocol):
    """What a variant's run gives a suite: its endpoint, its records so far, the looks of its gates."""

    endpoint: "Endpoint"
    variant: str
    seed: int
    settings: "Settings"
    timeout_s: float
    retry_backoff_s: float
    concurrency: int | None  # requests in flight for every suite (the noise floor's); None: each suite's own
    capacity: "Capacity | None"  # what the engine holds at once, read once it was up (None: it cannot say)
    work: Path  # this variant's folder for a suite's working files (lm-eval's request cache)
    logs: Path

    def done_ids(self, part: Part) -> set[str]: ...

    def used_concurrency(self, part: Part, n: int) -> None:
        """The requests in flight the part is evaluated with (the record says it)."""
        ...

    def is_complete(self, part: Part) -> bool: ...

    def put(self, part: Part, records: list[Record]) -> None:
        """Store records as they arrive."""
        ...

    def complete(self, part: Part, n_items: int) -> None: ...

    def skip(self, part: Part) -> bool:
        """Whether the part is skipped: a gate has already failed the variant (stop_variant_on_fail)."""
        ...

    def cuts(self, part: Part, ids: Sequence[str], groups: Sequence[str | None]) -> list[list[str]] | None:
        """The items cut at the looks of the part's sequential gates (None: no gate looks)."""
        ...

    def look(self, part: Part) -> bool:
        """At a cut: True when the part may stop (its gates decided, or one failed the variant)."""
        ...

    def finished(self, part: Part) -> None:
        """The part ran to its end (its fixed-n gates may now fail the variant)."""
        ...

    def stopping(self) -> bool:
        """A gate has failed the variant and the rest of its suites are to be skipped."""
        ...

    def step(self, description: str, total: int | None = None) -> AbstractContextManager[Callable[[int], None]]: ...

    def log(self, message: str) -> None: ...


@runtime_checkable
class Suite(Protocol):
    """One resolved `suites:` entry. A kind registered through the entry point group `qeval.suites` is a
    SuiteRef subclass whose `resolve` returns one of these."""

    @property
    def parts(self) -> tuple[Part, ...]: ...

    @property
    def concurrency(self) -> int:
        """Requests in flight, as its campaign entry sets them (`auto`: where the engine cannot say)."""
        ...

    def tally(self) -> Mapping[str, int]:
        """What `qeval validate` counts of it, e.g. {"custom suites": 1, "custom items": 50}: a count whose label
        ends in " items" is shown beside the one of the same first word."""
        ...

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        """Per part whose size is planned before a run (`qeval power`): its name, the metric its gate reads,
        its items (lm-eval: as its data and limit say) and their groups (empty: ungrouped)."""
        ...

    @staticmethod
    def preflight(suites: Sequence["Suite"], settings: "Settings", config_file: str = "",
                  runs_here: bool = True) -> Preflight:
        """Before any engine starts, what the kind's suites need on this machine, checked: called on the class,
        once for every suite of the kind in the campaign (one lm-eval process builds all its tasks), and running
        while the rest of the campaign is checked. `runs_here`: the suites run on this machine (the local
        executor); else each node brings its own, and what only a node has is not checked here."""
        ...

    def run(self, run: SuiteRun) -> None:
        """Evaluate what the store lacks of each part against `run.endpoint`, storing records as they come."""
        ...

    def views(self, part: Part, base: list[Record], cand: list[Record]) -> tuple[View, ...]:
        """The part's records paired, variant against baseline (item by item, or by chunk): what the verdict
        compares, and all a sequential look reads while the variant runs."""
        ...

    def pair(self, part: Part, base: list[Record], cand: list[Record]) -> Pairing:
        """The views, with the items that flipped and the per-token figures: what the record keeps."""
        ...

    def rekeyed(self, keys: Mapping[str, str]) -> "Suite":
        """The suite with its parts under the keys a finished run recorded (by part name), where those
        keys depend on the machine rather than on the suite's files; else itself."""
        ...


class ItemSuite:
    """What most suites share: nothing to check before a run, item-by-item pairing, flips of a 0/1 primary metric,
    no per-token figures, keys from their own files.
    Subclasses give `parts`, `concurrency`, `tally`, `sizes` and `run`."""

    parts: tuple[Part, ...]
    preflight = staticmethod(nothing_to_check)

    def views(self, part: Part, base: list[Record], cand: list[Record]) -> tuple[View, ...]:
        from ..verdict.pairing import align

        paired = align(part.suite, base, cand)
        metrics = sorted(paired.base)
        if not metrics:
            return (View(paired, None),)
        first = [r for r in base if r.sample == 0]
        looks = Looks(tuple(r.item_id for r in first), tuple(r.group for r in first),
                      {m: sum(r.scores[m] for r in first) / len(first) for m in metrics})
        return (View(paired, part.primary or metrics[0], looks=looks),)

    def pair(self, part: Part, base: list[Record], cand: list[Record]) -> Pairing:
        from ..verdict.flips import item_flips

        flip = (part.primary or sorted(base[0].scores)[0]) if base else None
        spec = part.metrics.get(flip) if flip else None
        flips = item_flips(flip, base, cand) if cand and spec is not None and spec.binary else None
        return Pairing(self.views(part, base, cand), flips=flips)

    def rekeyed(self, keys: Mapping[str, str]) -> Any:
        return self


@dataclass(frozen=True)
class InFlight:
    """How many requests a suite keeps in flight: `fixed`, or (auto) as many as the engine holds of its requests,
    at most `cap`, and `fixed` where the engine cannot say (an external endpoint: the user's number)."""

    fixed: int = 8
    auto: bool = False
    cap: int = 256

    @classmethod
    def of(cls, value: "int | str", cap: int, fallback: int) -> "InFlight":
        """From a campaign entry's setting: a number, or "auto" (`fallback` where the engine cannot say)."""
        return cls(fixed=fallback, auto=True, cap=cap) if value == "auto" else cls(fixed=int(value), cap=cap)


def requests_in_flight(run: SuiteRun, how: InFlight, parts: Sequence[Part], prompt_tokens: int,
                       output_tokens: int) -> int:
    """The requests in flight for `parts` on this run, recorded per part: the run's own where it sets one (the
    noise floor repeats a shape), else sized from the engine (auto), else the suite's number. `prompt_tokens`
    and `output_tokens` bound one request from above, so that the requests sized fit the KV cache at once.
    The sizing is imported here: loading the engines' package is left to those that run a suite."""
    from ..engines.capacity import size

    n = run.concurrency or (how.auto and size(run.capacity, prompt_tokens, output_tokens, how.cap)) or how.fixed
    for part in parts:
        run.used_concurrency(part, n)
    return n


def run_items(run: SuiteRun, part: Part, items: Sequence[tuple[str, str | None]],
              evaluate: Callable[[set[str], Callable[[list[Record]], None]], Any], note: str = "") -> None:
    """Run one part item by item: skip what is stored, store each record as it arrives, mark it done. With
    sequential gates, in the seeded order, a batch per look, until every gate of it is decided. `evaluate`
    is given the ids to leave out and where to put records."""
    if run.is_complete(part) or run.skip(part):
        return
    done = run.done_ids(part)
    ids = [i for i, _ in items]
    cuts = run.cuts(part, ids, [g for _, g in items]) or [ids]
    with run.step(f"[{run.variant}] {part.suite}{note}", total=len(items)) as advance:
        advance(len(done))

        def put(recs: list[Record]) -> None:
            run.put(part, recs)
            advance(len(recs))

        evaluated: set[str] = set(done)
        for batch in cuts:
            want = set(batch) - evaluated
            if want:
                evaluate(set(ids) - want, put)  # the runner skips what it is told is done: all but this batch
                evaluated |= want
            if len(cuts) > 1 and run.look(part):
                break
    # a part its gates stopped is complete at the items it used: a rerun does not serve it again
    run.complete(part, len(items) if evaluated >= set(ids) else len(evaluated & set(ids)))
    run.finished(part)


def tally_text(suites: Iterable[Suite]) -> str:
    """What `qeval validate` and `qeval doctor` say of a campaign's suites: "2 custom suites (93 items), ..."."""
    counts: dict[str, int] = {}
    for s in suites:
        for k, n in s.tally().items():
            counts[k] = counts.get(k, 0) + n
    items = {k.split()[0]: n for k, n in counts.items() if k.endswith(" items")}
    parts = [f"{n} {k}" + (f" ({items[k.split()[0]]} items)" if k.split()[0] in items else "")
             for k, n in counts.items() if not k.endswith(" items")]
    return ", ".join(parts) or "no suites"
