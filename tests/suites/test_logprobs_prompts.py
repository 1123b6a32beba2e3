"""The distribution probe over a custom suite's own prompts (`corpus: suite:DESCRIPTOR`)."""

from pathlib import Path

import pytest

from qeval.config import ConfigError, LogprobsSuiteRef, load_config
from qeval.suites.logprobs import load_logprobs_suite
from tests.conftest import campaign_file


def _suite(tmp_path: Path) -> Path:
    (tmp_path / "s.jsonl").write_text(
        '{"id": "1", "prompt": "Capital of France?", "reference": "Paris"}\n'
        '{"id": "2", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],'
        ' "reference": "4"}\n'
        '{"id": "3", "prompt": "Capital of Peru?", "reference": "Lima"}\n')
    d = tmp_path / "s.yaml"
    d.write_text("name: s\nitems: s.jsonl\ngeneration: {chat: true}\nscorers: [{kind: contains}]\n")
    return d


def test_each_item_is_one_chunk_and_the_key_follows_the_prompts(tmp_path):
    d = _suite(tmp_path)
    s = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", name="p", corpus=f"suite:{d}", chunks=2))
    assert s.chunks == ["Capital of France?", "Be brief.\n2+2?"]
    again = load_logprobs_suite(LogprobsSuiteRef(kind="logprobs", name="p", corpus=f"suite:{d}", chunks=3))
    assert again.key != s.key and len(again.chunks) == 3


def test_the_descriptor_is_resolved_from_the_campaign_file_and_must_exist(tmp_path):
    d = _suite(tmp_path)
    (tmp_path / "config.json").write_text("{}")

    def campaign(corpus: str) -> Path:
        return campaign_file(tmp_path, name="c", model={"path": str(tmp_path)}, output_dir=None,
                             baseline={"name": "b", "method": "bf16"}, variants=[{"name": "v", "method": "gptq"}],
                             suites=[{"kind": "logprobs", "name": "p", "corpus": corpus}])

    f = campaign(f"suite:{d.name}")
    assert load_config(f).suites[0].corpus == f"suite:{d}"
    campaign("suite:missing.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(f)
