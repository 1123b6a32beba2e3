"""A task YAML's data files: a relative path is taken against the YAML's own folder, a glob (a dataset saved in
shards) is expanded, every file is part of the task's key, and the copy lm-eval reads names them absolutely."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.errors import ConfigError, MissingEnvError
from qeval.suites.lmeval_tasks import materialize_tasks, resolve_tasks
from qeval.suites.spec import LmEvalSuiteRef

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "suites" / "lmeval"


def _task(folder: Path, name: str, data_files: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(f"task: {name}\ndataset_path: parquet\ndataset_kwargs:\n  data_files:\n{data_files}"
                    f"test_split: test\noutput_type: generate_until\ndoc_to_text: \"{{{{question}}}}\"\n"
                    f"doc_to_target: \"{{{{answer}}}}\"\n{extra}")
    return path


def _ref(folder: Path, *tasks: str) -> LmEvalSuiteRef:
    return LmEvalSuiteRef(kind="lm_eval", tasks=list(tasks), include_path=folder)


def test_a_data_file_beside_the_yaml_is_read_from_its_folder(tmp_path):
    tasks, data = tmp_path / "tasks", tmp_path / "data"
    data.mkdir()
    _task(tasks, "t", "    test: t.parquet\n")
    (tasks / "t.parquet").write_bytes(b"one")
    ref = _ref(tasks, "t")
    key = resolve_tasks(ref, data)[0].key
    (tasks / "t.parquet").write_bytes(b"two")
    assert resolve_tasks(ref, data)[0].key != key  # its data is part of its identity
    copy = materialize_tasks(ref, data, tmp_path / "work") / "t.yaml"
    assert f'test: "{tasks.resolve() / "t.parquet"}"' in copy.read_text()  # lm-eval reads it from anywhere


def test_remote_and_escaping_data_files_are_refused(tmp_path):
    tasks, data = tmp_path / "tasks", tmp_path / "data"
    data.mkdir()
    _task(tasks, "t", "    test: https://example.com/t.parquet\n")
    with pytest.raises(ConfigError, match="remote: qeval cannot download"):
        resolve_tasks(_ref(tasks, "t"), data)
    _task(tasks, "t", "    test: ../elsewhere.parquet\n")
    (tmp_path / "elsewhere.parquet").write_bytes(b"x")
    with pytest.raises(ConfigError, match="outside the data folder"):
        resolve_tasks(_ref(tasks, "t"), data)
    _task(tasks, "t", "    test: missing.parquet\n")
    with pytest.raises(MissingEnvError, match="missing.parquet"):
        resolve_tasks(_ref(tasks, "t"), data)


def test_shards_of_a_saved_dataset_are_each_part_of_the_key(tmp_path):
    """save_to_disk writes one data-00000-of-00001.arrow per split: same name, both hashed."""
    tasks, data = tmp_path / "tasks", tmp_path / "data"
    data.mkdir()
    _task(tasks, "t", "    test: saved/test/*.arrow\n    train: saved/train/*.arrow\n")
    for split in ("test", "train"):
        (tasks / "saved" / split).mkdir(parents=True)
        (tasks / "saved" / split / "data-00000-of-00001.arrow").write_bytes(split.encode())
    ref = _ref(tasks, "t")
    key = resolve_tasks(ref, data)[0].key
    (tasks / "saved" / "train" / "data-00000-of-00001.arrow").write_bytes(b"changed")
    assert resolve_tasks(ref, data)[0].key != key
    copy = (materialize_tasks(ref, data, tmp_path / "work") / "t.yaml").read_text()
    assert f'"{tasks.resolve() / "saved/test/*.arrow"}"' in copy


def test_function_tags_survive_and_their_code_travels(tmp_path):
    tasks, data = tmp_path / "tasks", tmp_path / "data"
    data.mkdir()
    _task(tasks, "t", "    test: t.parquet\n", "process_docs: !function utils.process_docs\n")
    (tasks / "t.parquet").write_bytes(b"x")
    (tasks / "utils.py").write_text("def process_docs(ds):\n    return ds\n")
    ref = _ref(tasks, "t")
    key = resolve_tasks(ref, data)[0].key
    work = materialize_tasks(ref, data, tmp_path / "work")
    assert "process_docs: !function 'utils.process_docs'" in (work / "t.yaml").read_text()
    assert (work / "utils.py").read_text() == (tasks / "utils.py").read_text()
    (tasks / "utils.py").write_text("def process_docs(ds):\n    return ds.select([0])\n")
    assert resolve_tasks(ref, data)[0].key != key  # its code decides what it evaluates


def test_the_shipped_tasks_materialize_as_written(tmp_path):
    data = tmp_path / "data"
    work = materialize_tasks(_ref(SHIPPED, "oe_arc_easy"), data, tmp_path / "work")
    for p in SHIPPED.glob("*.yaml"):
        assert (work / p.name).read_text() == p.read_text().replace("{qeval_data}", str(data))
