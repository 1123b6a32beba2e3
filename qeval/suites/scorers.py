"""Scorers: (response, reference) -> score in [0, 1]. Registered like every other pluggable piece."""

from __future__ import annotations

import math
import re
import string
from typing import Callable, Protocol

from ..config import ScorerSpec
from ..errors import ConfigError
from ..registry import Registry


class Scorer(Protocol):
    name: str

    def __call__(self, response: str, reference: str | list[str]) -> float: ...


SCORERS = Registry("scorer", entry_point_group="qeval.scorers")

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
    def __init__(self, name: str, fn: Callable[[str, str], bool]):
        self.name, self._fn = name, fn

    def __call__(self, response: str, reference: str | list[str]) -> float:
        return float(any(self._fn(response, r) for r in _refs(reference)))


@SCORERS.register("exact")
def _exact(spec: ScorerSpec) -> Scorer:
    return _Simple(spec.name or "exact", lambda resp, ref: resp.strip() == ref.strip())


@SCORERS.register("normalized")
def _normalized(spec: ScorerSpec) -> Scorer:
    return _Simple(spec.name or "normalized", lambda resp, ref: normalize(resp) == normalize(ref))


@SCORERS.register("contains")
def _contains(spec: ScorerSpec) -> Scorer:
    # whole words only: "Rome" must not match "Romero"
    def fn(resp: str, ref: str) -> bool:
        return re.search(rf"(?<!\w){re.escape(normalize(ref))}(?!\w)", normalize(resp)) is not None

    return _Simple(spec.name or "contains", fn)


@SCORERS.register("regex")
def _regex(spec: ScorerSpec) -> Scorer:
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
def _numeric(spec: ScorerSpec) -> Scorer:
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


def build_scorer(spec: ScorerSpec) -> Scorer:
    return SCORERS.get(spec.kind)(spec)
