"""The executor seam: where variants run is the campaign file's `executor` (a kind-discriminated union),
local by default; it changes no result, so it is not part of the config hash. Each built-in executor states the
whole Executor protocol, and the pipeline hands it what the protocol asks for (its work, its sink, its plans)."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.config import load_config
from qeval.errors import ConfigError
from qeval.executors.spec import LocalExecutorSpec
from qeval.executors.base import DriverSink, Executor, Unit, Work, make_executor
from qeval.executors.local import LocalExecutor
from qeval.executors.spec import EXECUTORS
from qeval.pipeline.sink import StoreSink
from qeval.pipeline.worker import VariantWork
from tests.conftest import campaign_file
from tests.protocols import check_class, check_instance


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


@pytest.mark.parametrize("kind", ["local", "ray"])
def test_every_built_in_executor_keeps_the_protocol(kind):
    assert check_class(EXECUTORS.get(kind), Executor) == []


def test_the_pipeline_hands_an_executor_what_it_asks_for(tmp_path):
    from qeval.pipeline.campaign import Campaign
    from qeval.pipeline.plan import plan
    from qeval.settings import Settings

    assert check_class(VariantWork, Work) == []
    assert check_class(StoreSink, DriverSink) == []
    config = _write(tmp_path)
    cfg, settings = load_config(config), Settings(cache=tmp_path / "cache", share_records=False)
    plans = Campaign(cfg, settings, config_file=str(config)).plans(plan(cfg, settings, str(config)))
    assert [check_instance(p, Unit) for p in plans] == [[], []]
    # positive control: what lacks a member the executor calls is reported
    assert check_class(LocalExecutor, Work) != [] and check_instance(object(), Unit) != []
