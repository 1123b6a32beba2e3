"""Scorers: (response, reference) -> score in [0, 1]. Registered like every other pluggable piece."""

from __future__ import annotations

import importlib
import json
import math
import re
import string
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

import yaml
from jsonschema import exceptions as schema_errors
from jsonschema import validators

from pydantic import Field

from ..errors import ConfigError
from ..registry import Registry
from ..validation import Kinded


class Scorer(Protocol):
    name: str
    binary: bool  # declared by the scorer: every score it gives is 0 or 1

    def __call__(self, response: str, reference: str | list[str]) -> float: ...


# -- scorer specs (what a suite descriptor says of each scorer)  ----------------------------------------------------------------------------------------

class ScorerSpec(Kinded):
    """What every scorer kind has; exact, normalized, contains and json_valid have nothing else."""

    kind: str
    name: str | None = None

    @classmethod
    def model_for(cls, kind: str) -> type["ScorerSpec"]:
        spec = getattr(SCORERS.get(kind), "Spec", None) or PluginScorerSpec
        if not (isinstance(spec, type) and issubclass(spec, ScorerSpec)):
            raise ValueError(f"scorer {kind!r}: its Spec must be a ScorerSpec (qeval.suites.scorers)")
        return spec


class RegexScorerSpec(ScorerSpec):
    pattern: str | None = None  # its first group (or whole match) is the answer


class NumericScorerSpec(ScorerSpec):
    tolerance: float | None = None  # relative; default 1e-6
    number: Literal["first", "last"] = "last"  # which number in the response is the answer


class JsonSchemaScorerSpec(ScorerSpec):
    # the schema inline, or a JSON / YAML file relative to the suite descriptor
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    schema_file: Path | None = None


class PluginScorerSpec(ScorerSpec):
    """A scorer that runs the user's code (and a plugin's that declares no Spec of its own)."""

    # declare that every score is 0 or 1 (exact tests); default continuous
    binary: bool | None = None


class PythonScorerSpec(PluginScorerSpec):
    callable: str | None = None  # "package.module:function", (response, reference) -> float in [0, 1]


SCORERS = Registry("scorer", entry_point_group="qeval.scorers")


def takes(spec: type[ScorerSpec]) -> Callable[[Any], Any]:
    """The model a scorer kind's settings are written in, found by the registry as the factory's `Spec`."""

    def deco(factory: Any) -> Any:
        factory.Spec = spec
        return factory

    return deco

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?|[-+]?\.\d+")


def normalize(text: str) -> str:
    """SQuAD-style: lowercase, drop punctuation and articles, squeeze whitespace."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in string.punctuation)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _refs(reference: str | list[str]) -> list[str]:
    return [reference] if isinstance(reference, str) else list(reference)


def numbers(text: str) -> list[float]:
    out = []
    for m in _NUMBER.finditer(text):
        try:
            out.append(float(m.group().replace(",", "")))
        except ValueError:
            pass
    return out


def first_number(text: str) -> float | None:
    found = numbers(text)
    return found[0] if found else None


class _Simple:
    binary = True  # a match or not

    def __init__(self, name: str, fn: Callable[[str, str], bool]):
        self.name, self._fn = name, fn

    def __call__(self, response: str, reference: str | list[str]) -> float:
        return float(any(self._fn(response, r) for r in _refs(reference)))


@SCORERS.register("exact")
@takes(ScorerSpec)
def _exact(spec: ScorerSpec) -> Scorer:
    return _Simple(spec.name or "exact", lambda resp, ref: resp.strip() == ref.strip())


@SCORERS.register("normalized")
@takes(ScorerSpec)
def _normalized(spec: ScorerSpec) -> Scorer:
    return _Simple(spec.name or "normalized", lambda resp, ref: normalize(resp) == normalize(ref))


@SCORERS.register("contains")
@takes(ScorerSpec)
def _contains(spec: ScorerSpec) -> Scorer:
    # whole words only: "Rome" must not match "Romero"
    def fn(resp: str, ref: str) -> bool:
        return re.search(rf"(?<!\w){re.escape(normalize(ref))}(?!\w)", normalize(resp)) is not None

    return _Simple(spec.name or "contains", fn)


@SCORERS.register("regex")
@takes(RegexScorerSpec)
def _regex(spec: RegexScorerSpec) -> Scorer:
    """The pattern's first group (or whole match) must equal the reference, after normalization."""
    if not spec.pattern:
        raise ConfigError("scorer 'regex' needs `pattern`")
    try:
        rx = re.compile(spec.pattern)
    except re.error as e:
        raise ConfigError(f"scorer 'regex': bad pattern {spec.pattern!r}: {e}") from None

    def fn(resp: str, ref: str) -> bool:
        m = rx.search(resp)
        return m is not None and normalize(m.group(1) if rx.groups else m.group()) == normalize(ref)

    return _Simple(spec.name or "regex", fn)


@SCORERS.register("numeric")
@takes(NumericScorerSpec)
def _numeric(spec: NumericScorerSpec) -> Scorer:
    """The response's last (or first) number is within `tolerance` (relative) of the reference.

    Last by default: models often restate the question ("4 + 9 = 13") before the answer."""
    tol = 1e-6 if spec.tolerance is None else spec.tolerance

    def fn(resp: str, ref: str) -> bool:
        found = numbers(resp)
        got = (found[-1] if spec.number == "last" else found[0]) if found else None
        want = first_number(ref)
        if got is None or want is None:
            return False
        return math.isclose(got, want, rel_tol=tol, abs_tol=tol)

    return _Simple(spec.name or "numeric", fn)


def _not_a_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_not_a_constant)
_NOT_JSON = object()  # JSON's null is a value: None cannot mean "no JSON here"
_FENCE = re.compile(r"```([\w+.-]*)")
_OPEN = re.compile(r"[\[{]")


def _loads(text: str) -> Any:
    try:
        value, end = _DECODER.raw_decode(text)
    except (ValueError, RecursionError):
        return _NOT_JSON
    return value if end == len(text) else _NOT_JSON


def _fenced(text: str) -> str | None:
    """The content of the first ```json (any case) or untagged code block; to the end if never closed."""
    marks = list(_FENCE.finditer(text))
    for k in range(0, len(marks), 2):  # fences pair up in order: opening, closing
        if marks[k].group(1).lower() in ("", "json"):
            return text[marks[k].end():marks[k + 1].start() if k + 1 < len(marks) else len(text)]
    return None


def extract_json(response: str) -> Any:
    """The one JSON value a response holds, or `_NOT_JSON`. The first rule that applies decides:

    1. the whole response, stripped of whitespace, is one JSON value (any type; RFC 8259, so NaN and
       Infinity are not JSON; a repeated key keeps its last value);
    2. else, if it has a Markdown code fence tagged ``json`` (any case) or untagged, the first such
       block's content (up to the closing fence, or the end if the answer was cut off), stripped, must
       be one JSON value; text outside the fence is ignored;
    3. else, prose around one object or array: from the first ``{`` or ``[``, one JSON object or array,
       with no ``{`` or ``[`` anywhere after it (two candidates make the answer ambiguous, so no JSON).
    """
    whole = _loads(response.strip())
    if whole is not _NOT_JSON:
        return whole
    fenced = _fenced(response)
    if fenced is not None:
        return _loads(fenced.strip())
    start = _OPEN.search(response)
    if start is None:
        return _NOT_JSON
    try:
        value, end = _DECODER.raw_decode(response, start.start())
    except (ValueError, RecursionError):
        return _NOT_JSON
    return value if isinstance(value, (dict, list)) and not _OPEN.search(response, end) else _NOT_JSON


class _Json:
    """Scores the JSON a response holds; the reference is not read (it may be anything, e.g. "")."""

    binary = True  # valid or not

    def __init__(self, name: str, check: Callable[[Any], bool]):
        self.name, self._check = name, check

    def __call__(self, response: str, reference: str | list[str]) -> float:
        value = extract_json(response)
        return float(value is not _NOT_JSON and self._check(value))


@SCORERS.register("json_valid")
@takes(ScorerSpec)
def _json_valid(spec: ScorerSpec) -> Scorer:
    """1 when the response holds one JSON value (see `extract_json` for exactly what counts), else 0."""
    return _Json(spec.name or "json_valid", lambda value: True)


def _read_schema(name: str, path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
        return yaml.safe_load(text) if path.suffix in (".yaml", ".yml") else json.loads(text)
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"scorer {name!r}: cannot read schema_file {path}: {e}") from None
    except (ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"scorer {name!r}: schema_file {path} is not valid JSON / YAML: "
                          f"{' '.join(str(e).split())}") from None


@SCORERS.register("json_schema")
@takes(JsonSchemaScorerSpec)
def _json_schema(spec: JsonSchemaScorerSpec) -> Scorer:
    """1 when the response holds one JSON value (as `json_valid`) that validates against the JSON Schema in
    `schema` (inline) or `schema_file`; the schema's `$schema` picks the draft (default: the latest)."""
    name = spec.name or "json_schema"
    if (spec.schema_ is None) == (spec.schema_file is None):
        raise ConfigError(f"scorer {name!r} needs exactly one of `schema` or `schema_file`")
    schema = spec.schema_ if spec.schema_ is not None else _read_schema(name, spec.schema_file)  # type: ignore[arg-type]
    if not isinstance(schema, dict):
        raise ConfigError(f"scorer {name!r}: the schema must be a mapping, not {type(schema).__name__}")
    cls = validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except schema_errors.SchemaError as e:
        raise ConfigError(f"scorer {name!r}: not a valid JSON Schema at {e.json_path}: "
                          f"{' '.join(e.message.split())}") from None
    validator = cls(schema)
    return _Json(name, validator.is_valid)


class _Python:
    def __init__(self, name: str, fn: Callable[[str, str | list[str]], float], binary: bool):
        self.name, self._fn, self.binary = name, fn, binary

    def __call__(self, response: str, reference: str | list[str]) -> float:
        return self._fn(response, reference)  # the suite runner checks the value: its errors name the item


@SCORERS.register("python")
@takes(PythonScorerSpec)
def _python(spec: PythonScorerSpec) -> Scorer:
    """`callable: "package.module:function"`, imported when the suite loads; called as (response, reference)."""
    name, target = spec.name or "python", spec.callable
    module_name, _, attr = (target or "").partition(":")
    if not module_name or not attr:
        raise ConfigError(f"scorer {name!r} needs `callable: \"package.module:function\"`, got {target!r}")
    try:
        obj: Any = importlib.import_module(module_name)
    except Exception as e:  # noqa: BLE001 (any error in the user's module is a bad `callable`)
        raise ConfigError(f"scorer {name!r}: cannot import {module_name!r}: {type(e).__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ConfigError(f"scorer {name!r}: module {module_name!r} has no {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise ConfigError(f"scorer {name!r}: {target!r} is not callable (it is a {type(obj).__name__} value)")
    return _Python(name, obj, binary=bool(spec.binary))  # a number in [0, 1] unless it says 0/1


def build_scorer(spec: ScorerSpec) -> Scorer:
    return SCORERS.get(spec.kind)(spec)
