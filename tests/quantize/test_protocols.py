"""Every registered built-in quantizer states the whole Quantizer protocol (quantize/base.py): what the pipeline,
the campaign file's checks and `qeval doctor` call on a quantizer, present, callable, and taking what they pass."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from qeval.errors import ConfigError
from qeval.quantize import QUANTIZERS, Quantizer, QuantizerBase
from qeval.settings import Runtime
from tests.protocols import check_class, check_instance, members


def test_the_protocol_states_what_its_callers_call():
    assert {"name", "methods", "install_hint", "needs_gpu", "test_double", "runtime_of", "spec", "cache_key",
            "quantize", "__init__"} <= set(members(Quantizer))


@pytest.mark.parametrize("name", QUANTIZERS.names())
def test_every_registered_quantizer_keeps_the_protocol(name):
    cls = QUANTIZERS.get(name)
    assert issubclass(cls, QuantizerBase)
    assert check_class(cls, Quantizer) == []
    q = cls(runtime=Runtime("py", Path(sys.executable)), engine=None, dtype="bfloat16")  # as quantizer_for does
    assert check_instance(q, Quantizer) == []
    assert isinstance(cls.methods, frozenset) and cls.methods  # the built-ins say what they make


def test_the_check_catches_a_missing_member():
    class Partial(QuantizerBase):
        name = "partial"

        def __init__(self, runtime, engine=None, dtype="bfloat16"):
            pass

    problems = check_class(Partial, Quantizer)
    assert {p.split(":")[0] for p in problems} == {"Partial.runtime_of", "Partial.spec", "Partial.cache_key",
                                                   "Partial.quantize"}


def test_the_registry_refuses_a_plugin_quantizer_without_the_base():
    with pytest.raises(ConfigError, match="must subclass qeval.quantize.base.QuantizerBase"):
        QUANTIZERS._checked("bare", "my_plugin:Bare", type("Bare", (), {}))
