"""The JSON scorers, the `python` scorer and scorers from a plugin's entry point."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from qeval.suites.scorers import ScorerSpec
from qeval.errors import ConfigError
from qeval.suites.custom import load_suite, score
from qeval.suites.scorers import SCORERS, build_scorer

PERSON = {"type": "object", "required": ["name", "year"], "additionalProperties": False,
          "properties": {"name": {"type": "string"}, "year": {"type": "integer"}}}


@pytest.mark.parametrize("response, want", [
    ('{"a": 1}', 1.0),
    ('  [1, 2]\n', 1.0),
    ('"just a string"', 1.0),  # any JSON value: json_schema is the one that asks for a shape
    ("42", 1.0),
    ("null", 1.0),
    ('```json\n{"a": 1}\n```', 1.0),
    ('Sure! Here it is:\n```JSON\n{"a": 1}\n```\nAnything else?', 1.0),
    ('```\n[1]\n```', 1.0),
    ('```json\n{"a": 1}', 1.0),  # cut off before the closing fence, the value whole
    ('```python\nx = 1\n```\n```json\n{"a": 1}\n```', 1.0),  # the first json (or untagged) block
    ('```json\n{"a": 1,}\n```', 0.0),
    ('```json\nThe answer: {"a": 1}\n```', 0.0),  # inside a fence, the content is the value
    ('The answer is {"a": 1}. Hope that helps!', 1.0),
    ('Answer: [1, {"b": 2}] done', 1.0),
    ('{"a": 1} and also {"b": 2}', 0.0),  # two values: ambiguous
    ('The answer is "x"', 0.0),  # prose around a bare string is not accepted
    ('{"a": NaN}', 0.0),
    ('{"a": Infinity}', 0.0),
    ("{'a': 1}", 0.0),
    ('{"a": 1', 0.0),
    ("", 0.0),
    ("no json here", 0.0),
    ("[" * 100_000, 0.0),  # deep nesting is not a crash
])
def test_json_valid(response, want):
    assert build_scorer(ScorerSpec(kind="json_valid"))(response, "ignored") == want


@pytest.mark.parametrize("response, want", [
    ('{"name": "Ada Lovelace", "year": 1815}', 1.0),
    ('```json\n{"name": "Ada Lovelace", "year": 1815}\n```', 1.0),
    ('{"name": "Ada Lovelace", "year": "1815"}', 0.0),
    ('{"name": "Ada Lovelace", "year": 1815.5}', 0.0),
    ('{"name": "Ada Lovelace"}', 0.0),
    ('{"name": "Ada", "year": 1815, "born": "London"}', 0.0),
    ('[{"name": "Ada", "year": 1815}]', 0.0),
    ("not json", 0.0),
])
def test_json_schema_inline(response, want):
    s = build_scorer(ScorerSpec(kind="json_schema", schema=PERSON))
    assert s.name == "json_schema" and s(response, ["any", "reference"]) == want


def suite_files(tmp_path: Path, scorers: list[dict], items: list[dict] | None = None) -> Path:
    items = items or [{"id": "a", "prompt": "p", "reference": ""}]
    (tmp_path / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items))
    d = tmp_path / "s.yaml"
    d.write_text(json.dumps({"name": "s", "items": "items.jsonl", "scorers": scorers}))  # JSON is YAML
    return d


def test_json_schema_file_relative_to_the_descriptor_and_in_the_key(tmp_path):
    (tmp_path / "schemas").mkdir()
    f = tmp_path / "schemas" / "person.json"
    f.write_text(json.dumps(PERSON))
    d = suite_files(tmp_path, [{"kind": "json_schema", "schema_file": "schemas/person.json"}])
    suite = load_suite(d)
    assert suite.scorers[0]('{"name": "Ada", "year": 1815}', "") == 1.0
    f.write_text(json.dumps({**PERSON, "required": ["name"]}))  # another schema is another suite
    assert load_suite(d).key != suite.key
    (tmp_path / "schemas" / "person.yaml").write_text("type: array\n")
    d.write_text(d.read_text().replace("person.json", "person.yaml"))
    assert load_suite(d).scorers[0]("[1]", "") == 1.0


@pytest.mark.parametrize("spec, says", [
    ({"kind": "json_schema", "schema": {"type": "integr"}}, "scorer 'json_schema': not a valid JSON Schema at $.type"),
    ({"kind": "json_schema", "name": "shape", "schema": {"properties": 5}},
     "scorer 'shape': not a valid JSON Schema at $.properties"),
    ({"kind": "json_schema"}, "needs exactly one of `schema` or `schema_file`"),
    ({"kind": "json_schema", "schema": {}, "schema_file": "bad.json"}, "needs exactly one of"),
    ({"kind": "json_schema", "schema_file": "nope.json"}, "scorers.0.schema_file: schema_file"),
    ({"kind": "json_schema", "schema_file": "bad.json"}, "is not valid JSON / YAML"),
    ({"kind": "python"}, 'needs `callable: "package.module:function"`, got None'),
    ({"kind": "python", "callable": "qeval.errors"}, "needs `callable"),
    ({"kind": "python", "callable": "qeval_surely_absent_module:f"},
     "cannot import 'qeval_surely_absent_module': ModuleNotFoundError"),
    ({"kind": "python", "callable": "qeval.errors:nope"}, "module 'qeval.errors' has no 'nope'"),
    ({"kind": "python", "callable": "qeval.errors:EXIT_USAGE"}, "is not callable (it is a int value)"),
    ({"kind": "exact"}, None),  # with the next one: two scorers of one name
])
def test_bad_scorer_specs_name_the_descriptor(tmp_path, spec, says):
    (tmp_path / "bad.json").write_text("{not json")
    scorers = [spec] if says else [spec, spec]
    with pytest.raises(ConfigError) as e:
        load_suite(suite_files(tmp_path, scorers))
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "s.yaml") + ":") and "\n" not in msg
    assert (says or "repeat: give `name:`") in msg, msg


PLUGIN = """
import math


class Short:
    def __init__(self, spec):
        self.name = spec.name or "short"

    def __call__(self, response, reference):
        return float(len(response) <= int(reference))


def factory(spec):
    return Short(spec)


def overlap(response, reference):
    got, want = set(response.lower().split()), set(reference.lower().split())
    return len(got & want) / len(want)


def too_big(response, reference):
    return 2.0


def not_a_number(response, reference):
    return math.nan


def a_string(response, reference):
    return "1"


def raises(response, reference):
    raise KeyError("no such thing")
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A package installed the way pip leaves one: its module and a dist-info with entry_points.txt."""
    site = tmp_path / "site"
    (site / "qeval_test_plugin").mkdir(parents=True)
    (site / "qeval_test_plugin" / "__init__.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "qeval_test_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: qeval-test-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[qeval.scorers]\nshort_enough = qeval_test_plugin:factory\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(SCORERS, "_items", dict(SCORERS._items))  # what the test loads goes with it
    yield tmp_path
    sys.modules.pop("qeval_test_plugin", None)


def test_scorer_from_an_entry_point(plugin):
    assert "short_enough" in SCORERS.names()
    suite = load_suite(suite_files(plugin, [{"kind": "short_enough", "name": "short"}],
                                   [{"id": "a", "prompt": "p", "reference": "5"}]))
    assert score(suite, suite.items[0], "Paris") == {"short": 1.0}
    assert score(suite, suite.items[0], "Paris, France") == {"short": 0.0}


def test_unknown_kind_still_suggests_a_plugin_name(plugin):
    with pytest.raises(ConfigError, match="Did you mean 'short_enough'"):
        load_suite(suite_files(plugin, [{"kind": "short_enuf"}]))


def test_python_callable_scorer(plugin):
    suite = load_suite(suite_files(plugin, [{"kind": "python", "callable": "qeval_test_plugin:overlap"}],
                                   [{"id": "a", "prompt": "p", "reference": "Ada Lovelace"}]))
    assert suite.scorers[0].name == "python"
    assert score(suite, suite.items[0], "ada lovelace") == {"python": 1.0}
    assert score(suite, suite.items[0], "Ada Byron") == {"python": 0.5}


@pytest.mark.parametrize("fn, says", [
    ("too_big", "returned 2.0 for item 'x'; a score is a number in [0, 1]"),
    ("not_a_number", "returned nan for item 'x'"),
    ("a_string", "returned '1' for item 'x'"),
    ("raises", "failed on item 'x': KeyError: 'no such thing'"),
])
def test_python_scorer_bad_values_name_the_descriptor_and_item(plugin, fn, says):
    d = suite_files(plugin, [{"kind": "python", "callable": f"qeval_test_plugin:{fn}"}],
                    [{"id": "x", "prompt": "p", "reference": "r"}])
    suite = load_suite(d)
    with pytest.raises(ConfigError) as e:
        score(suite, suite.items[0], "anything")
    assert str(e.value).startswith(f"{d}:scorer 'python': ") and says in str(e.value), str(e.value)


def test_the_example_json_suite_loads():
    suite = load_suite(Path(__file__).resolve().parents[2] / "suites" / "custom" / "json_facts.yaml")
    assert len(suite.items) == 26 and [s.name for s in suite.scorers] == ["json_schema", "json_valid", "year"]
    assert suite.primary == "json_schema"
    assert suite.scorers[0]('```json\n{"name": "Suez Canal", "year": 1869}\n```', "1869") == 1.0
    assert suite.scorers[0]('{"name": "Suez Canal", "year": 1869, "person": {"name": "x"}}', "1869") == 0.0
