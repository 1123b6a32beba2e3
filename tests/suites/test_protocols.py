"""Every built-in suite kind, and the test plugin's, states the whole Suite protocol (suites/base.py): what the
plan, a variant's run, the monitor, the judge and `qeval validate` call on a suite, present, callable, and taking
what they pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from qeval.suites.base import ItemSuite, Suite
from qeval.suites.custom import CustomSuite
from qeval.suites.lmeval import LmEvalSuite
from qeval.suites.logprobs import LogprobsSuite
from tests.protocols import check_class, members

PLUGINS = Path(__file__).resolve().parents[1] / "plugins"


def problems(cls: type) -> list[str]:
    # a suite is made by its entry's resolve: the protocol states no constructor (typing gives it one)
    return [p for p in check_class(cls, Suite) if not p.startswith(f"{cls.__name__}.__init__:")]


def test_the_protocol_states_what_its_callers_call():
    assert {"parts", "concurrency", "tally", "sizes", "preflight", "run", "views", "pair", "rekeyed"} <= \
        set(members(Suite))


@pytest.mark.parametrize("cls", [CustomSuite, LmEvalSuite, LogprobsSuite])
def test_every_built_in_suite_keeps_the_protocol(cls):
    assert problems(cls) == []


def test_the_plugin_suite_keeps_the_protocol(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    from qeval_testplugin import WordsSuite

    assert problems(WordsSuite) == []


def test_the_check_catches_a_missing_member():
    class Partial(ItemSuite):
        def run(self, run):
            pass

    assert {p.split(":")[0] for p in problems(Partial)} == {"Partial.tally", "Partial.sizes"}
