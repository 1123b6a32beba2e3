"""Makes real inspect_ai eval logs for the inspect importer's tests: `python inspect_logs.py OUT_DIR`.

inspect_ai itself runs a 12-sample task with its built-in `includes()` scorer against `mockllm/model`, whose answers
are right on the items chosen per run, and writes each log as inspect writes it (`.eval` and `.json`). Beside them,
`expected.json` holds what inspect's own `read_eval_log` reads from each log: every item's value (the sample's score
through inspect's value_to_float where the task ran one epoch, its reduction over the epochs otherwise). Nothing here
needs a network: every mock answer carries its token usage, so inspect counts no tokens with a downloaded encoding.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

from inspect_ai import Task, eval as inspect_eval, task
from inspect_ai.dataset import Sample
from inspect_ai.log import read_eval_log
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import Score, Target, accuracy, includes, model_graded_qa, scorer, value_to_float
from inspect_ai.solver import TaskState, generate

N = 12
BASE_RIGHT = frozenset(range(9))  # items 0-8
CAND_RIGHT = (BASE_RIGHT - {1, 4}) | {10}  # loses 1 and 4, gains 10
EPOCHS = 3


def _dataset() -> list[Sample]:
    return [Sample(id=i, input=f"What is the capital of country {i}?", target=f"city{i}") for i in range(N)]


def _output(text: str) -> ModelOutput:
    out = ModelOutput.from_content("mockllm/model", text)
    out.usage = ModelUsage(input_tokens=8, output_tokens=2, total_tokens=10)
    return out


def _item(messages) -> int:
    return int(re.search(r"country (\d+)", messages[-1].text).group(1))


def answering(right_times: dict[int, int]):
    """A mock model that answers item i right its first right_times[i] times it is asked, wrong after."""
    asked: Counter[int] = Counter()

    def answer(messages, tools, tool_choice, config) -> ModelOutput:
        i = _item(messages)
        asked[i] += 1
        return _output(f"It is city{i}." if asked[i] <= right_times.get(i, 0) else "I do not know.")

    return answer


@task
def capitals(epochs: int = 1):
    return Task(dataset=_dataset(), solver=generate(), scorer=includes(), epochs=epochs)


def _grader(partial: frozenset[int]):
    def grade(messages, tools, tool_choice, config) -> ModelOutput:
        i = int(re.search(r"capital of country (\d+)", messages[-1].text).group(1))
        return _output("GRADE: P" if i in partial else "GRADE: C")

    return grade


@task
def graded():
    return Task(dataset=_dataset(), solver=generate(),
                scorer=model_graded_qa(partial_credit=True,
                                       model=get_model("mockllm/model", custom_outputs=_grader(frozenset({2, 5})))))


@scorer(metrics=[accuracy()])
def verdict_word():
    """A scorer whose value is a word inspect does not know (inspect reads it as 0 with a warning)."""
    async def score(state: TaskState, target: Target) -> Score:
        return Score(value="maybe" if state.sample_id == 3 else "C")

    return score


@task
def worded():
    return Task(dataset=_dataset(), solver=generate(), scorer=verdict_word())


def _run(t: Task, model_answers, out: Path, name: str, fmt: str) -> Path:
    [log] = inspect_eval(t, model=get_model("mockllm/model", custom_outputs=model_answers), log_dir=str(out / "raw"),
                         log_format=fmt, display="none")
    assert log.status == "success", log.error
    dest = out / f"{name}.{fmt}"
    shutil.move(log.location, dest)
    return dest


def _inspects_values(path: Path) -> dict[str, float]:
    log = read_eval_log(str(path))
    to_float = value_to_float()
    if log.eval.config.epochs and log.eval.config.epochs > 1:
        [red] = log.reductions
        return {str(s.sample_id): float(s.value) for s in red.samples}
    return {str(s.id): to_float(s.scores["includes"].value) for s in log.samples}


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    once = {"base": {i: 1 for i in BASE_RIGHT}, "cand": {i: 1 for i in CAND_RIGHT}}
    thrice = {"base3": {i: i % 4 for i in range(N)}, "cand3": {i: max(0, i % 4 - (i in (2, 7))) for i in range(N)}}
    made = []
    for name, right in once.items():
        for fmt in ("eval", "json"):
            made.append(_run(capitals(), answering(right), out, name, fmt))
    for name, right in thrice.items():
        made.append(_run(capitals(epochs=EPOCHS), answering({i: k for i, k in right.items()}), out, name, "json"))
    _run(graded(), answering({i: 1 for i in range(N)}), out, "graded", "json")
    _run(worded(), answering({}), out, "worded", "json")
    shutil.rmtree(out / "raw", ignore_errors=True)
    expected = {p.name: _inspects_values(p) for p in made}
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
