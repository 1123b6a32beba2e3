"""Open doors: an engine and a scorer registered through entry points only (tests/plugins: a package and
its dist-info, put on sys.path, nothing installed) are named in a campaign file and its suite, bring
their own settings, validate, and resolve in the plan; a misspelled kind gets the registry's did-you-mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from qeval.pipeline.campaign import Campaign
from qeval.pipeline.plan import engine_spec as _engine_spec, plan
from qeval.config import load_config
from qeval.engines.base import build_engine
from qeval.engines.registry import ENGINES
from qeval.errors import ConfigError
from qeval.settings import Settings
from qeval.suites.scorers import SCORERS

PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    for registry in (ENGINES, SCORERS):  # what the entry points add is gone after the test
        monkeypatch.setattr(registry, "_items", dict(registry._items))


def workspace(tmp_path: Path, engine: dict, scorer: dict) -> Path:
    (tmp_path / "items.jsonl").write_text(json.dumps({"id": "a", "prompt": "2 + 2?", "reference": "4"}) + "\n")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "items": "items.jsonl", "scorers": [scorer]}))
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    cfg = {"name": "t", "model": {"path": "ck"}, "baseline": {"name": "base", "method": "bf16"},
           "variants": [{"name": "q", "method": "checkpoint", "checkpoint": "ck"}],
           "engine": engine, "suites": [{"kind": "custom", "path": "s.yaml"}]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return tmp_path / "c.yaml"


def test_a_plugin_engine_and_scorer_are_named_validated_and_planned(plugin, tmp_path):
    f = workspace(tmp_path, {"kind": "echo", "answer": "4"}, {"kind": "constant", "value": 0.5})
    cfg = load_config(f)
    assert type(cfg.engine).__name__ == "EchoSpec" and cfg.engine.answer == "4"
    p = plan(cfg, Settings(cache=tmp_path / "cache"), str(f))
    (suite,) = p.custom
    assert suite.scorers[0].name == "constant" and suite.scorers[0]("anything", "4") == 0.5
    v = cfg.variants[0]
    spec = _engine_spec(cfg, v)
    engine = build_engine(spec.kind, v, v.checkpoint, spec, Settings(cache=tmp_path / "cache"), tmp_path)
    assert type(engine).__name__ == "EchoEngine" and engine.start().engine == "echo"
    assert Campaign(cfg, Settings(cache=tmp_path / "cache")).variant_key(v, "h").startswith("ckpt:")


@pytest.mark.parametrize("engine, scorer, says", [
    ({"kind": "ecko"}, {"kind": "constant"},
     "c.yaml:line 12: engine.kind: unknown engine 'ecko'. Did you mean 'echo'?"),
    ({"kind": "echo", "answr": "4"}, {"kind": "constant"},
     "c.yaml:line 13: engine.answr: unknown key (did you mean 'answer'?)"),
    ({"kind": "echo"}, {"kind": "constnt"}, "s.yaml:line 4: scorers.0.kind: unknown scorer 'constnt'. Did you mean "
                                              "'constant'?"),
    ({"kind": "echo"}, {"kind": "constant", "valeu": 1}, "s.yaml:line 5: scorers.0.valeu: unknown key (did you mean "
                                                          "'value'?)"),
    ({"kind": "echo"}, {"kind": "constant", "value": 2}, "s.yaml:line 5: scorers.0.value: Input should be less than "
                                                          "or equal to 1"),
])
def test_a_plugin_kind_misspelled_is_found_with_its_file_and_line(plugin, tmp_path, engine, scorer, says):
    f = workspace(tmp_path, engine, scorer)
    with pytest.raises(ConfigError) as e:
        plan(load_config(f), Settings(cache=tmp_path / "cache"), str(f))
    assert says in str(e.value), str(e.value)


def test_without_the_plugin_its_kind_is_unknown(tmp_path):
    f = workspace(tmp_path, {"kind": "echo"}, {"kind": "exact"})
    with pytest.raises(ConfigError, match=r"line 12: engine.kind: unknown engine 'echo'.* Known: external, fake, tgi"):
        load_config(f)
