"""Custom suites: a YAML descriptor + JSONL items, generated against the endpoint and scored per item."""

from __future__ import annotations

import asyncio
import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from pydantic import Field, SerializeAsAny, ValidationError, model_validator

from .. import aio
from ..engines import Endpoint
from ..errors import ConfigError
from ..hashing import file_hash, key_hash, stable_hash
from ..record.metrics import MetricSpec, continuous, indicator
from ..validation import Name, Strict, error_message, keys_at, non_defaults, parse_model, read_yaml, unknown_key
from ..record.store import Record
from .base import InFlight, ItemSuite, Part, SuiteRun, requests_in_flight, run_items
from .http import session
from .scorers import Scorer, build_scorer
from .scorers import ScorerSpec
from .spec import GenerationSpec

MAX_LINE_BYTES = 1 << 20  # a 1 MiB item is a mistake, not a prompt


class SuiteDescriptor(Strict):
    name: Name
    description: str = ""
    items: Path
    generation: GenerationSpec = GenerationSpec()
    scorers: list[SerializeAsAny[ScorerSpec]] = Field(min_length=1)
    primary: str | None = None  # the scorer the gate reads; default: the first

    @model_validator(mode="after")
    def _primary_known(self) -> "SuiteDescriptor":
        names = [s.name or s.kind for s in self.scorers]
        if len(set(names)) < len(names):
            raise ValueError(f"scorer names {names} repeat: give `name:` to tell two of a kind apart")
        if self.primary is not None and self.primary not in names:
            raise ValueError(f"primary {self.primary!r} is not one of the scorers {names}")
        return self


class Message(Strict):
    role: str
    content: str


class Item(Strict):
    id: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[Message] | None = None
    reference: str | list[str]
    group: str | None = None
    metadata: dict[str, Any] = {}  # free-form (difficulty, source, ...): kept with each record, not scored

    @model_validator(mode="after")
    def _one_input(self) -> "Item":
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` or `messages`")
        return self


@dataclass(frozen=True)
class CustomSuite(ItemSuite):
    descriptor: SuiteDescriptor
    items: list[Item]
    scorers: list[Scorer]
    key: str  # content hash of descriptor + items (+ schema files): the store key
    source: Path | None = None  # the descriptor, named by errors found while scoring
    in_flight: InFlight = InFlight(8)  # requests in flight, as the campaign's entry sets them

    @property
    def concurrency(self) -> int:
        return self.in_flight.fixed

    def request_tokens(self) -> tuple[int, int]:
        """One request's tokens bounded from above: the longest prompt at 2 characters a token (text runs 3-4),
        and the answer's max_tokens."""
        chars = max((len(it.prompt) if it.prompt is not None else sum(len(str(m.content)) for m in it.messages)
                     for it in self.items), default=0)
        return chars // 2 + 1, self.descriptor.generation.max_tokens

    @property
    def name(self) -> str:
        return self.descriptor.name

    @property
    def primary(self) -> str:
        return self.descriptor.primary or self.scorers[0].name

    def metrics(self) -> dict[str, MetricSpec]:
        """Each scorer's metric, as the scorer declares it; a mean over several samples is not 0/1."""
        one = self.descriptor.generation.samples == 1
        where = f"scorer of {self.source or self.name}"
        return {s.name: indicator(where) if one and getattr(s, "binary", False) else continuous(True, where)
                for s in self.scorers}

    # -- the Suite protocol (suites/base.py) -------------------------------------------------------
    @property
    def parts(self) -> tuple[Part, ...]:
        metrics = self.metrics()
        return (Part(suite=f"custom/{self.name}", key=self.key, metrics=metrics, primary=self.primary,
                     planned=tuple(metrics), grouped=any(it.group is not None for it in self.items)),)

    def tally(self) -> dict[str, int]:
        return {"custom suites": 1, "custom items": len(self.items)}

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        grouped = bool(self.items) and all(i.group is not None for i in self.items)
        return [(f"custom/{self.name}", self.primary, len(self.items),
                 tuple(i.group for i in self.items) if grouped else ())]

    def run(self, run: SuiteRun) -> None:
        (part,) = self.parts
        run_items(run, part, [(it.id, it.group) for it in self.items],
                  lambda done, put: run_custom(self, run.endpoint, done, put, concurrency=requests_in_flight(
                                                   run, self.in_flight, [part], *self.request_tokens()),
                                               timeout_s=run.timeout_s, retry_backoff_s=run.retry_backoff_s))

    def __reduce__(self):
        # scorers are closures over their specs: a suite travels (pickled) as its specs, rebuilt where it lands
        return (_rebuilt, (self.descriptor, self.items, self.key, self.source, self.in_flight))


def _rebuilt(descriptor: SuiteDescriptor, items: list[Item], key: str, source: Path | None,
             in_flight: InFlight = InFlight(8)) -> CustomSuite:
    return CustomSuite(descriptor=descriptor, items=items, scorers=[build_scorer(s) for s in descriptor.scorers],
                       key=key, source=source, in_flight=in_flight)


def load_items(path: Path) -> list[Item]:
    file = str(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read items: {e.strerror}", file=file) from None
    items: list[Item] = []
    seen: dict[str, int] = {}
    for lineno, line in enumerate(raw.splitlines(), 1):
        where = f"line {lineno}"
        if len(line) > MAX_LINE_BYTES:
            raise ConfigError(f"line is {len(line)} bytes (limit {MAX_LINE_BYTES})", file=file, where=where)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"not UTF-8 (byte {e.start})", file=file, where=where) from None
        if not text.strip():
            continue
        try:
            data = json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(f"{c} is not allowed")))
        except ValueError as e:
            raise ConfigError(f"not valid JSON: {e}", file=file, where=where) from None
        if not isinstance(data, dict):
            raise ConfigError("expected a JSON object", file=file, where=where)
        try:
            item = Item.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            msg = unknown_key(err["loc"][-1], keys_at(Item, data, tuple(err["loc"][:-1]))) \
                if err["type"] == "extra_forbidden" else error_message(err)
            raise ConfigError(msg, file=file, where=f"{where}: {key}" if key else where) from None
        if item.id in seen:
            raise ConfigError(f"duplicate id {item.id!r} (first on line {seen[item.id]})", file=file, where=where)
        seen[item.id] = lineno
        items.append(item)
    if not items:
        raise ConfigError("the suite has no items", file=file)
    return items


def _beside(descriptor: Path, p: Path, where: str) -> Path:
    """A path the descriptor names: absolute as given (the campaign's author chose it); relative ones
    must stay in the descriptor's folder, so that a suite copied from elsewhere reads only its own files."""
    if p.is_absolute():
        return p
    root = descriptor.parent.resolve()
    out = (root / p).resolve()
    if not out.is_relative_to(root):
        raise ConfigError(f"{p} leads outside the suite's folder ({root})", file=str(descriptor), where=where)
    return out


def _doc_hash(item: Item) -> str:
    # what the item says: a field added to items later, unset, leaves every item's hash as it was
    return stable_hash(non_defaults(item))


def resolve(ref, settings, policy, config_file: str = "") -> CustomSuite:
    """A campaign's `kind: custom` entry (CustomSuiteRef)."""
    return load_suite(ref.path, InFlight.of(ref.concurrency, ref.max_concurrency, fallback=8))


def load_suite(path: Path, in_flight: InFlight = InFlight(8)) -> CustomSuite:
    data, node = read_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError("expected a mapping (the suite descriptor)", file=str(path))
    desc: SuiteDescriptor = parse_model(SuiteDescriptor, data, str(path), node)
    items_path = _beside(path, desc.items, "items")
    if not items_path.is_file():
        raise ConfigError(f"items file {items_path} does not exist", file=str(path), where="items")
    # what the descriptor says (its items file enters by content, below), a setting added later unset adding nothing
    key_parts = {"descriptor": {k: x for k, x in non_defaults(desc).items() if k != "items"}}
    specs = []
    for i, spec in enumerate(desc.scorers):
        if getattr(spec, "schema_file", None) is not None:  # relative to the descriptor; its content is keyed
            f = _beside(path, spec.schema_file, f"scorers.{i}.schema_file")
            if not f.is_file():
                raise ConfigError(f"schema_file {f} does not exist", file=str(path), where=f"scorers.{i}.schema_file")
            key_parts[f"schema_file.{i}"] = file_hash(f)
            spec = spec.model_copy(update={"schema_file": f})
        specs.append(spec)
    desc = desc.model_copy(update={"items": items_path, "scorers": specs})
    try:
        scorers = [build_scorer(s) for s in desc.scorers]
    except ConfigError as e:
        raise ConfigError(str(e), file=str(path), where="scorers") from None
    items = load_items(items_path)
    key = key_hash(key_parts | {"items": file_hash(items_path)})
    return CustomSuite(descriptor=desc, items=items, scorers=scorers, key=f"custom:{desc.name}:{key}", source=path,
                       in_flight=in_flight)


def sample_seeds(item_id: str, samples: int) -> list[int]:
    """One seed per sample. A single sample keeps seed 0 (as before samples existed); several get seeds from
    the item id and the sample index: every variant and every rerun asks each sample with the same seed."""
    if samples == 1:
        return [0]
    return [int(stable_hash([item_id, k]), 16) % 2**31 for k in range(samples)]


def _request(item: Item, gen: GenerationSpec, model: str, seed: int = 0) -> tuple[str, dict[str, Any]]:
    common: dict[str, Any] = {"model": model, "max_tokens": gen.max_tokens, "temperature": gen.temperature,
                              "seed": seed}
    if gen.stop:
        common["stop"] = gen.stop
    if gen.chat:
        msgs = [m.model_dump() for m in item.messages] if item.messages else [{"role": "user", "content": item.prompt}]
        return "/chat/completions", {**common, "messages": msgs}
    if item.messages:
        raise ConfigError(f"item {item.id!r} has messages but the suite's generation.chat is false")
    return "/completions", {**common, "prompt": item.prompt}


def _text(path: str, body: dict[str, Any]) -> str:
    choice = body["choices"][0]
    return choice["message"]["content"] or "" if path == "/chat/completions" else choice["text"]


async def _run(suite: CustomSuite, endpoint: Endpoint, todo: list[Item], sink: Callable[[list[Record]], None],
               concurrency: int, timeout_s: float, retries: int, retry_backoff_s: float) -> None:
    gen = suite.descriptor.generation
    sem = asyncio.Semaphore(concurrency)
    async with session(endpoint, timeout_s, concurrency) as client:

        async def ask(item: Item, seed: int) -> str:
            path, payload = _request(item, gen, endpoint.model, seed)
            async with sem:
                return await client.post_json(path, payload, what=f"suite {suite.name}: item {item.id!r}",
                                              retries=retries, retry_backoff_s=retry_backoff_s,
                                              parse=lambda body: _text(path, body))

        async def one(item: Item) -> None:
            seeds = sample_seeds(item.id, gen.samples)
            responses = await asyncio.gather(*(ask(item, seed) for seed in seeds))
            per_sample = [score(suite, item, response) for response in responses]
            # the item's score is the mean over its samples; one record holds them all, so a resumed run
            # finds an item either whole or not at all
            scores = {s.name: sum(p[s.name] for p in per_sample) / len(per_sample) for s in suite.scorers}
            extra = {} if len(seeds) == 1 else {"samples": [{"seed": seed, "response": response, "scores": p}
                                                            for seed, response, p in zip(seeds, responses, per_sample)]}
            if item.metadata:
                extra["metadata"] = item.metadata
            _, payload = _request(item, gen, endpoint.model, seeds[0])
            prompt_hash = stable_hash(payload | {"model": None, "seed": seeds[0] if len(seeds) == 1 else seeds})
            sink([Record(item_id=item.id, scores=scores, prompt_hash=prompt_hash,
                         doc_hash=_doc_hash(item), group=item.group, response=responses[0],
                         extra=extra)])

        await asyncio.gather(*(one(i) for i in todo))


def score(suite: CustomSuite, item: Item, response: str) -> dict[str, float]:
    """Every scorer's score of one response; a scorer that fails or gives no number in [0, 1] is an error
    that names the descriptor, the scorer and the item (plugins and `python` scorers are user code)."""
    out: dict[str, float] = {}
    file = str(suite.source) if suite.source else None
    for s in suite.scorers:
        where = f"scorer {s.name!r}"
        try:
            value = s(response, item.reference)
        except Exception as e:  # noqa: BLE001
            raise ConfigError(f"failed on item {item.id!r}: {type(e).__name__}: {e}", file=file,
                              where=where) from e
        if not isinstance(value, numbers.Real) or not (0 <= value <= 1):  # NaN fails the range test too
            raise ConfigError(f"returned {value!r} for item {item.id!r}; a score is a number in [0, 1]",
                              file=file, where=where)
        out[s.name] = float(value)
    return out


def run_custom(suite: CustomSuite, endpoint: Endpoint, done: set[str], sink: Callable[[list[Record]], None],
               concurrency: int = 8, timeout_s: float = 300, retries: int = 2, retry_backoff_s: float = 1.0) -> int:
    """Generate and score every item not in `done`; each record goes to `sink` as soon as it is scored.
    A request the engine fails is tried `retries` more times, `retry_backoff_s` apart (EngineSpec's)."""
    todo = [i for i in suite.items if i.id not in done]
    if todo:
        aio.run(_run(suite, endpoint, todo, sink, concurrency, timeout_s, retries, retry_backoff_s))
    return len(todo)

