"""The executor seam: where variants run is the campaign file's `executor` (a kind-discriminated union),
local by default; it changes no result, so it is not part of the config hash."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.errors import ConfigError
from qeval.executors.spec import LocalExecutorSpec
from qeval.executors.base import make_executor
from qeval.executors.local import LocalExecutor
from tests.conftest import campaign_file


def _write(tmp_path: Path, **extra) -> Path:
    (tmp_path / "ck").mkdir(exist_ok=True)
    (tmp_path / "ck" / "config.json").write_text("{}")
    return campaign_file(tmp_path, name="e", model={"path": "ck"}, output_dir=None,
                         baseline={"name": "b", "method": "bf16"},
                         variants=[{"name": "q", "method": "checkpoint", "checkpoint": "ck"}], probe={"enabled": True},
                         extra=extra)


def test_local_is_the_default_and_naming_it_changes_no_hash(tmp_path):
    plain = load_config(_write(tmp_path))
    named = load_config(_write(tmp_path, executor={"kind": "local"}))
    assert plain.executor == named.executor == LocalExecutorSpec()
    assert plain.config_hash() == named.config_hash()
    assert isinstance(make_executor(named.executor, max_seconds=5), LocalExecutor)


def test_an_unknown_executor_kind_names_its_line(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml:line \d+: executor.kind: unknown executor 'locl'. Did you mean "
                                          r"'local'\?"):
        load_config(_write(tmp_path, executor={"kind": "locl"}))
