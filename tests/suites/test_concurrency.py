"""A suite entry's `concurrency: auto`: read from the campaign file, sized from the engine's capacity where it
can say and the entry's own number where it cannot, and never part of a key."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from qeval.engines.capacity import Capacity
from qeval.suites.base import InFlight, Part, requests_in_flight
from qeval.suites.custom import load_suite
from qeval.suites.spec import CustomSuiteRef, LmEvalSuiteRef, LogprobsSuiteRef
from qeval.validation import non_defaults

ROOT = Path(__file__).resolve().parents[2]
CAPITALS = ROOT / "suites/custom/capitals.yaml"


class Run:
    """The little of a SuiteRun that sizing reads and writes."""

    def __init__(self, capacity: Capacity | None, concurrency: int | None = None):
        self.capacity, self.concurrency, self.used = capacity, concurrency, {}

    def used_concurrency(self, part: Part, n: int) -> None:
        self.used[part.suite] = n


PART = Part(suite="custom/x", key="k", metrics={})


def test_auto_sizes_from_the_engine_and_records_it():
    run = Run(Capacity(kv_tokens=4_000, max_num_seqs=128))
    assert requests_in_flight(run, InFlight.of("auto", 256, fallback=8), [PART], 90, 10) == 40  # 4,000 // 100
    assert run.used == {"custom/x": 40}


def test_auto_keeps_the_entrys_number_where_the_engine_cannot_say():
    run = Run(None)
    assert requests_in_flight(run, InFlight.of("auto", 256, fallback=8), [PART], 90, 10) == 8
    assert run.used == {"custom/x": 8}


def test_a_number_is_kept_whatever_the_engine_holds():
    run = Run(Capacity(kv_tokens=4_000, max_num_seqs=128))
    assert requests_in_flight(run, InFlight.of(3, 256, fallback=8), [PART], 90, 10) == 3


def test_the_runs_own_number_wins():  # the noise floor repeats the baseline's shape at its own concurrency
    run = Run(Capacity(kv_tokens=4_000, max_num_seqs=128), concurrency=2)
    assert requests_in_flight(run, InFlight.of("auto", 256, fallback=8), [PART], 90, 10) == 2


@pytest.mark.parametrize("model, field", [(CustomSuiteRef, "concurrency"), (LmEvalSuiteRef, "num_concurrent"),
                                          (LogprobsSuiteRef, "concurrency")])
def test_each_kind_reads_auto_and_refuses_other_words(model, field):
    base = {"custom": {"kind": "custom", "path": "x.yaml"}, "lm_eval": {"kind": "lm_eval", "tasks": ["t"]},
            "logprobs": {"kind": "logprobs"}}[model.model_fields["kind"].annotation.__args__[0]]
    ref = TypeAdapter(model).validate_python({**base, field: "auto", "max_concurrency": 64})
    assert (getattr(ref, field), ref.max_concurrency) == ("auto", 64)
    with pytest.raises(ValidationError):
        TypeAdapter(model).validate_python({**base, field: "many"})
    # a file that sets neither says nothing more than before: existing campaigns keep their hash
    assert set(non_defaults(TypeAdapter(model).validate_python(base))) == set(base)


def test_concurrency_enters_no_suite_key():
    assert load_suite(CAPITALS).key == load_suite(CAPITALS, InFlight.of("auto", 64, fallback=8)).key


def test_a_custom_suite_bounds_its_requests_from_its_longest_prompt_and_max_tokens():
    suite = load_suite(CAPITALS)
    prompt, output = suite.request_tokens()
    longest = max(len(it.prompt or "") + sum(len(m.content) for m in it.messages or []) for it in suite.items)
    assert (prompt, output) == (longest // 2 + 1, suite.descriptor.generation.max_tokens)
