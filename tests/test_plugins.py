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
from qeval.suites.spec import SUITES
from tests.conftest import campaign_file, fake_checkpoint

PLUGINS = Path(__file__).resolve().parent / "plugins"


@pytest.fixture
def plugin(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    for registry in (ENGINES, SCORERS, SUITES):  # what the entry points add is gone after the test
        monkeypatch.setattr(registry, "_items", dict(registry._items))


def workspace(tmp_path: Path, engine: dict, scorer: dict) -> Path:
    (tmp_path / "items.jsonl").write_text(json.dumps({"id": "a", "prompt": "2 + 2?", "reference": "4"}) + "\n")
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({"name": "s", "items": "items.jsonl", "scorers": [scorer]}))
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    # its own dump, not tests.conftest.campaign_file: the misspelled kinds below are found by their line (12, 13)
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
    (suite,) = p.suites
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


def test_a_plugin_suite_kind_runs_and_is_gated_end_to_end(plugin, tmp_path):
    """A suite kind a plugin registers (its SuiteRef resolves to its own Suite) is served, stored, paired
    and gated like a built-in one: on the fake engine, baseline and variant, through the whole campaign."""
    from qeval.engines.fake import FakeEngineSpec
    from qeval.pipeline import campaign
    from qeval.record.store import ResultsStore

    fake_checkpoint(tmp_path, "base", FakeEngineSpec())
    q = fake_checkpoint(tmp_path, "q", FakeEngineSpec(model="other"))
    campaign_file(tmp_path, name="words", variants=[{"name": "q", "method": "checkpoint", "checkpoint": q}],
                  engine={"kind": "fake", "startup_timeout_s": 10}, suites=[{"kind": "words", "n": 30, "words": 2}],
                  gates={"rules": [{"match": "words/*", "margin": 0.2}]}, mlflow={"enabled": False})
    result = campaign.run(load_config(tmp_path / "c.yaml"), Settings(cache=tmp_path / "cache", share_records=False),
                          config_file=str(tmp_path / "c.yaml"))
    record = result.record
    (gate,) = [g for g in record.gates if g.suite == "words/w"]
    assert gate.metric == "enough" and gate.variant == "q" and gate.verdict in ("PASS", "FAIL", "INCONCLUSIVE")
    (c,) = [c for c in record.comparisons if c.suite == "words/w"]
    assert c.n_paired == 30 and c.binary and c.primary
    with ResultsStore(result.run_dir / "results.sqlite") as store:
        for v in record.variants:
            recs = store.records(v.key, "words:w:30:2")
            assert len(recs) == 30 and all(r.scores["enough"] in (0.0, 1.0) for r in recs)
    assert [s.suite for s in record.variants[0].suites] == ["words/w"]
