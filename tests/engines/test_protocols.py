"""Every registered built-in engine states the whole Engine protocol (engines/base.py): what the pipeline, `qeval
setup`/`doctor` and the probe call on an engine kind and an engine, present, callable, and taking what they pass."""

from __future__ import annotations

import pytest

from qeval.engines import Engine, EngineBase
from qeval.engines.registry import ENGINES
from qeval.errors import ConfigError
from tests.engines.test_contract import _built
from tests.protocols import check_class, check_instance, incompatible, members


def test_the_protocol_states_what_its_callers_call():
    stated = set(members(Engine))
    assert {"kind", "label", "Spec", "capabilities", "test_double", "default_runtime", "no_kernel", "check_plan",
            "serve_dtypes", "start", "health", "memory", "stop", "hung", "name", "log_path", "startup_seconds",
            "__init__", "__enter__", "__exit__"} <= stated


def test_the_base_class_gives_every_optional_member():
    """What an engine class must still write itself: its kind, and how it answers and what it uses."""
    assert sorted(p.split(":")[0] for p in check_class(EngineBase, Engine)) == [
        "EngineBase.health", "EngineBase.kind", "EngineBase.memory"]


@pytest.mark.parametrize("kind", ENGINES.names())
def test_every_registered_engine_keeps_the_protocol(kind, tmp_path):
    cls = ENGINES.get(kind)
    assert issubclass(cls, EngineBase)
    assert check_class(cls, Engine) == []
    assert check_instance(_built(kind, tmp_path), Engine) == []
    assert cls.label  # messages name it


def test_the_check_catches_what_breaks_a_caller():
    """Positive control: a class missing a member, one static method made an instance method, and signatures a
    caller's arguments would not fit are each reported."""
    import inspect

    class Broken(EngineBase):
        kind = "broken"

        def no_kernel(self, spec, variant, cpu=None):  # called on the class: must be static
            return None

        @staticmethod
        def check_plan(spec, variant):  # the caller passes probe and cpu too
            return None

        def stop(self, grace):  # the caller may leave grace_s out, and may name it
            pass

    problems = check_class(Broken, Engine)
    assert any("Broken.no_kernel" in p and "staticmethod" in p for p in problems)
    assert any("Broken.check_plan" in p and "takes no 'probe'" in p for p in problems)
    assert any("Broken.stop" in p and "as 'grace'" in p for p in problems)
    assert any("Broken.stop" in p and "no default" in p for p in problems)
    assert any("Bare.start" in p for p in check_class(type("Bare", (), {}), Engine))
    assert incompatible(inspect.signature(lambda a, b=1: 0), inspect.signature(lambda a, b=1, *, c: 0)) == [
        "needs 'c', which the protocol's callers never pass"]


def test_the_registry_refuses_a_plugin_engine_without_the_base():
    """An entry point's class is checked as it loads: one that is no EngineBase would lack the defaults qeval calls."""
    with pytest.raises(ConfigError, match="engine 'bare' .* must subclass qeval.engines.base.EngineBase"):
        ENGINES._checked("bare", "my_plugin:Bare", type("Bare", (), {"kind": "bare"}))
    echo = type("Echo", (EngineBase,), {"kind": "echo"})
    assert ENGINES._checked("echo", "my_plugin:Echo", echo) is echo
