"""The docs' reference pages are rendered from the code: every campaign key and every CLI command appears."""

from __future__ import annotations

import importlib.util
import re
import typing
from pathlib import Path

import pytest
import typer
from pydantic import BaseModel

from qeval.cli import app
from qeval.config import CampaignConfig
from qeval.record.run import RunRecord

HOOK = Path(__file__).resolve().parents[1] / "docs" / "hooks" / "reference.py"


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("qeval_docs_reference", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _rendered_keys(markdown: str) -> set[str]:
    """The key path in the first cell of every table row."""
    return set(re.findall(r"^\| `([^`]+)` \|", markdown, flags=re.M))


def test_every_top_level_campaign_key_is_rendered(reference):
    keys = _rendered_keys(reference.render_campaign())
    for name, field in CampaignConfig.model_fields.items():
        assert (field.alias or name) in keys, f"campaign key {name!r} missing from the reference"


def test_nested_campaign_keys_are_rendered(reference):
    keys = _rendered_keys(reference.render_campaign())
    for key in ["model.dtype", "variants[].recipe.calibration.path", "gates.rules[].margin",
                "gates.performance[].max_ratio", "probe.slo", "grid.engine.max_num_seqs", "noise_floor.concurrency"]:
        assert key in keys, key


def test_each_engine_suite_and_executor_kind_has_a_table(reference):
    text = reference.render_campaign()
    for title in ["engine (kind: vllm)", "engine (kind: external)", "engine (kind: tgi)", "engine (kind: trtllm)",
                  "suites[] (kind: custom)", "suites[] (kind: lm_eval)", "suites[] (kind: logprobs)",
                  "executor (kind: local)", "executor (kind: ray)"]:
        assert f"## `{title}`" in text, title


def test_every_run_record_field_is_rendered(reference):
    keys = _rendered_keys(reference.render_record())

    def fields(model: type[BaseModel], prefix: str = "") -> list[str]:
        out = []
        for name, f in model.model_fields.items():
            path = f"{prefix}{f.alias or name}"
            out.append(path)
            many = typing.get_origin(f.annotation) is list
            for arg in [f.annotation, *typing.get_args(f.annotation)]:
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    out += fields(arg, f"{path}[]." if many else f"{path}.")
        return out

    missing = [k for k in fields(RunRecord) if k not in keys]
    assert not missing, missing


def test_a_field_left_out_of_the_walk_is_missed(reference, monkeypatch):
    # the check above must be able to fail: drop one field from the rendering and it is noticed
    walk = reference.walk

    def walk_without_seed(model, *a, **k):
        for t in walk(model, *a, **k):
            t.rows = [r for r in t.rows if r[0] != "seed"]
            yield t

    monkeypatch.setattr(reference, "walk", walk_without_seed)
    with pytest.raises(AssertionError, match="seed"):
        test_every_top_level_campaign_key_is_rendered(reference)


def test_every_cli_command_is_rendered(reference):
    text = reference.render_cli()
    group = typer.main.get_command(app)
    names = group.list_commands(group.context_class(group))
    assert {"run", "finish", "validate", "plan", "report", "sync", "ui", "data"} <= set(names)
    for name in names:
        assert f"## `qeval {name}`" in text, name
    assert "## `qeval data add`" in text
    assert "`--max-minutes`" in text and "`--only`" in text


def test_the_hook_replaces_its_markers(reference):
    page = "# CLI\n\n<!-- qeval:cli -->\n"
    out = reference.on_page_markdown(page, page=None, config=None, files=None)
    assert "<!-- qeval:cli -->" not in out and "## `qeval run`" in out
