"""Safe by default: remote code only where the model's entry allows it; task data only from its roots."""

from pathlib import Path

import pytest

from qeval.pipeline.plan import engine_spec as _engine_spec
from qeval.config import ConfigError, LmEvalSuiteRef, load_config
from qeval.engines.vllm import VllmEngine
from qeval.settings import Settings
from qeval.suites.lmeval_tasks import resolve_tasks
from tests.conftest import campaign_file


def _cfg(tmp_path, **over) -> Path:
    (tmp_path / "config.json").write_text("{}")
    doc = {"model": {"path": str(tmp_path)}, "baseline": {"name": "bf16", "method": "bf16"},
           "variants": [{"name": "w", "method": "gptq"}], "probe": {"enabled": True}, **over}
    return campaign_file(tmp_path, name="s", output_dir=None, **doc)


def _argv(cfg, v, tmp_path) -> list[str]:
    return VllmEngine(variant=v, checkpoint=tmp_path, spec=_engine_spec(cfg, v), settings=Settings(cache=tmp_path),
                      log_dir=tmp_path).argv(8000)


def test_remote_code_is_off_unless_the_model_says(tmp_path):
    cfg = load_config(_cfg(tmp_path))
    assert "--trust-remote-code" not in _argv(cfg, cfg.variants[0], tmp_path)
    cfg = load_config(_cfg(tmp_path, model={"path": str(tmp_path), "trust_remote_code": True}))
    assert "--trust-remote-code" in _argv(cfg, cfg.variants[0], tmp_path)


@pytest.mark.parametrize("over", [
    {"engine": {"trust_remote_code": True}},
    {"variants": [{"name": "w", "method": "gptq", "engine": {"trust_remote_code": True}}]},
    {"engine": {"extra_args": ["--trust-remote-code"]}},
])
def test_remote_code_cannot_be_turned_on_elsewhere(tmp_path, over):
    f = _cfg(tmp_path, **over)
    with pytest.raises(ConfigError, match="model.trust_remote_code") as e:
        load_config(f)
    assert str(f) in str(e.value)


def test_task_data_cannot_escape_its_roots(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tmp_path / "secret.jsonl").write_text('{"q": 1}\n')
    (tasks / "t.yaml").write_text("task: t\ndataset_path: json\noutput_type: generate_until\n"
                                  "dataset_kwargs:\n  data_files:\n    test: ../secret.jsonl\n")
    data = tmp_path / "data"
    data.mkdir()
    ref = LmEvalSuiteRef(kind="lm_eval", tasks=["t"], include_path=tasks)
    with pytest.raises(ConfigError, match="outside the data folder") as e:
        resolve_tasks(ref, data, "c.yaml")
    assert "t.yaml" in str(e.value)
    (tasks / "t.yaml").write_text("task: t\ndataset_path: json\noutput_type: generate_until\n"
                                  "dataset_kwargs:\n  data_files:\n    test: '{qeval_data}/ok.jsonl'\n")
    (data / "ok.jsonl").write_text('{"q": 1}\n')
    assert [t.output_type for t in resolve_tasks(ref, data, "c.yaml")] == ["generate_until"]


def test_suite_files_stay_in_the_suite_folder(tmp_path):
    from qeval.suites.custom import load_suite

    (tmp_path / "outside.jsonl").write_text('{"id": "1", "prompt": "p", "reference": "r"}\n')
    suite = tmp_path / "suite"
    suite.mkdir()
    d = suite / "s.yaml"
    d.write_text("name: s\nitems: ../outside.jsonl\nscorers: [{kind: exact}]\n")
    with pytest.raises(ConfigError, match="outside the suite's folder") as e:
        load_suite(d)
    assert str(d) in str(e.value) and "items" in str(e.value)
    (suite / "in.jsonl").write_text('{"id": "1", "prompt": "p", "reference": "r"}\n')
    d.write_text("name: s\nitems: in.jsonl\nscorers: [{kind: exact}]\n")
    assert len(load_suite(d).items) == 1
