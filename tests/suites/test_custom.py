"""Custom suite files: loading, the errors for bad lines, and the scorers."""

import json
from pathlib import Path

import pytest

from qeval.suites.scorers import ScorerSpec
from qeval.errors import ConfigError
from qeval.suites.custom import load_items, load_suite
from qeval.suites.scorers import build_scorer, first_number, normalize

ROOT = Path(__file__).resolve().parents[2]


def test_project_suites_load():
    for name in ("capitals", "arithmetic"):
        s = load_suite(ROOT / "suites" / "custom" / f"{name}.yaml")
        assert len(s.items) >= 40 and s.key.startswith(f"custom:{name}:")


def jsonl(tmp_path, lines) -> Path:
    p = tmp_path / "items.jsonl"
    p.write_bytes(b"\n".join(x if isinstance(x, bytes) else x.encode() for x in lines) + b"\n")
    return p


OK = json.dumps({"id": "a", "prompt": "hi", "reference": "x"})


@pytest.mark.parametrize("bad, match", [
    ("{not json", r"items.jsonl:line 2: not valid JSON"),
    ('{"id": "b", "prompt": "p"}', r"line 2: reference: Field required"),
    ('{"id": "b", "prompt": "p", "reference": "r", "extra": 1}', r"line 2: extra: unknown key"),
    ('{"id": "a", "prompt": "p", "reference": "r"}', r"line 2: duplicate id 'a' \(first on line 1\)"),
    ('[1, 2]', r"line 2: expected a JSON object"),
    ('{"id": "b", "prompt": "p", "messages": [], "reference": "r"}', r"exactly one of `prompt` or `messages`"),
    ('{"id": "b", "prompt": "p", "reference": NaN}', r"line 2: not valid JSON: NaN is not allowed"),
])
def test_bad_lines(tmp_path, bad, match):
    with pytest.raises(ConfigError, match=match):
        load_items(jsonl(tmp_path, [OK, bad]))


def test_non_utf8_and_empty(tmp_path):
    with pytest.raises(ConfigError, match=r"line 2: not UTF-8"):
        load_items(jsonl(tmp_path, [OK, b'{"id": "\xff"}']))
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(ConfigError, match="no items"):
        load_items(empty)


def test_descriptor_errors(tmp_path):
    (tmp_path / "items.jsonl").write_text(OK + "\n")
    d = tmp_path / "s.yaml"
    d.write_text("name: s\nitems: items.jsonl\nscorers: [{kind: exakt}]\n")
    with pytest.raises(ConfigError, match=r"s.yaml:line 3: scorers.0.kind: unknown scorer 'exakt'. Did you mean 'exact'\?"):
        load_suite(d)
    d.write_text("name: s\nitems: items.jsonl\nscorer: [{kind: exact}]\n")
    with pytest.raises(ConfigError, match=r"line 3: scorer: unknown key"):
        load_suite(d)


@pytest.mark.parametrize("kind, extra, response, reference, want", [
    ("exact", {}, " Paris ", "Paris", 1.0),
    ("exact", {}, "paris", "Paris", 0.0),
    ("normalized", {}, "The Paris.", "paris", 1.0),
    ("contains", {}, "It is Rome, of course", "Rome", 1.0),
    ("contains", {}, "Romero", "Rome", 0.0),
    ("contains", {}, "Bogotá", ["Bogota", "Bogotá"], 1.0),
    ("numeric", {"tolerance": 0}, "The answer is 1,024.", "1024", 1.0),
    ("numeric", {"tolerance": 0}, "-3", "3", 0.0),
    ("numeric", {"tolerance": 0}, "4 + 9 = 13", "13", 1.0),
    ("numeric", {"tolerance": 0, "number": "first"}, "4 + 9 = 13", "13", 0.0),
    ("numeric", {"tolerance": 0.01}, "3.14", "3.1416", 1.0),
    ("regex", {"pattern": r"answer: (\w+)"}, "my answer: B", "b", 1.0),
])
def test_scorers(kind, extra, response, reference, want):
    assert build_scorer(ScorerSpec(kind=kind, **extra))(response, reference) == want


def test_helpers():
    assert normalize("  The  Quick, brown fox! ") == "quick brown fox"
    assert first_number("no number") is None
    assert first_number("x = -2.5e3") == -2500.0


def test_a_scorer_takes_its_own_kinds_settings_only(tmp_path):
    (tmp_path / "items.jsonl").write_text(OK + "\n")
    d = tmp_path / "s.yaml"
    d.write_text("name: s\nitems: items.jsonl\nscorers:\n  - kind: numeric\n    tolerance: 0.01\n    pattern: x\n")
    with pytest.raises(ConfigError) as e:
        load_suite(d)
    assert str(e.value) == f"{d}:line 6: scorers.0.pattern: unknown key"
    d.write_text("name: s\nitems: items.jsonl\nscorers:\n  - kind: numeric\n    tolerence: 0.01\n")
    with pytest.raises(ConfigError) as e:
        load_suite(d)
    assert str(e.value) == f"{d}:line 5: scorers.0.tolerence: unknown key (did you mean 'tolerance'?)"


def test_a_failed_request_is_tried_again_after_the_engines_retry_backoff(tmp_path):
    import time

    from qeval.engines import Endpoint
    from qeval.suites.custom import run_custom
    from tests.loopback import Loopback, js

    (tmp_path / "items.jsonl").write_text(OK + "\n")
    (tmp_path / "s.yaml").write_text('{"name": "s", "items": "items.jsonl", "scorers": [{"kind": "contains"}]}')
    suite = load_suite(tmp_path / "s.yaml")
    answers = [js({"error": "boom"}, status=500)] * 2 + [js({"choices": [{"message": {"content": "x"}}]})]
    for backoff in (0.3, 0.01):
        got = []
        with Loopback({"POST /v1/chat/completions": list(answers)}) as root:
            ep = Endpoint(base_url=root + "/v1", model="m", tokenizer=None, engine="vllm")
            t0 = time.monotonic()
            run_custom(suite, ep, set(), got.extend, retries=2, retry_backoff_s=backoff)
            took = time.monotonic() - t0
        assert [r.scores for r in got] == [{"contains": 1.0}]  # the third try answered
        assert took >= 2 * backoff and (backoff > 0.1 or took < 1.5)  # not the 2 s of two fixed seconds
