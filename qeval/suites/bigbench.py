"""BIG-bench tasks from the bigbench sdist on PyPI (the one `qeval setup` downloads, never committed): a task's
task.json extracted into the data folder beside rows {id, input, choices, gold, target} that lm-eval's json
loader reads, and a task YAML to start from. Standard library only, so that any Python can run it
(`python3 -m qeval.suites.bigbench SDIST OUT TASK...`)."""

from __future__ import annotations

import difflib
import json
import sys
import tarfile
from pathlib import Path

from ..errors import ConfigError, MissingEnvError

SDIST = "bigbench-1.0.0.tar.gz"  # in <data>/.download, where `qeval setup` puts it
TASKS = "bigbench-1.0.0/bigbench/benchmark_tasks/"
SHIPPED = ("general_knowledge", "arithmetic/1_digit_addition", "unit_conversion/unit_identification",
           "movie_recommendation", "logical_sequence")  # what suites/lmeval/ reads


def convert(src: Path, dst: Path) -> int:
    """task.json -> JSONL rows; `gold` is the index of the best-scored choice, `target` the first target."""
    task = json.loads(src.read_text())
    rows = []
    for i, ex in enumerate(task["examples"]):
        scores = ex.get("target_scores") or {}
        choices = list(scores)
        gold = max(range(len(choices)), key=lambda k: scores[choices[k]]) if choices else None
        target = ex.get("target")
        target = target[0] if isinstance(target, list) else target
        if target is None and gold is not None:
            target = choices[gold]
        rows.append({"id": str(i), "input": ex["input"], "choices": choices, "gold": gold, "target": target})
    dst.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return len(rows)


def extract(sdist: Path, out: Path, tasks: list[str]) -> dict[str, int]:
    """Each task's task.json (and its JSONL rows) into out/<task>/; the rows per task. A task is named as in
    BIG-bench's benchmark_tasks folder: `phrase_relatedness`, or a subtask `arithmetic/2_digit_addition`."""
    if not sdist.is_file():
        raise MissingEnvError("the bigbench sdist", str(sdist))
    wanted = {t.strip("/"): None for t in tasks}
    json_tasks, programmatic = set(), set()
    found: dict[str, bytes] = {}
    with tarfile.open(sdist, "r:gz") as tar:
        for m in tar:  # one pass: a gzip stream cannot seek (~10 s for the 360 MB sdist)
            if not m.isfile() or not m.name.startswith(TASKS):
                continue
            rel, _, leaf = m.name[len(TASKS):].rpartition("/")
            if leaf == "task.json":
                json_tasks.add(rel)
                if rel in wanted:
                    found[rel] = tar.extractfile(m).read()
            elif leaf == "task.py":
                programmatic.add(rel)
    problems = []
    for t in wanted:
        if t in found and not json.loads(found[t]).get("examples"):
            subs = sorted(s for s in json_tasks if s.startswith(t + "/"))
            problems.append(f"{t} has no examples of its own: name one of its subtasks ({', '.join(subs[:8])}"
                            f"{', ...' if len(subs) > 8 else ''})")
        elif t not in found and t in programmatic:
            problems.append(f"{t} is a programmatic BIG-bench task (task.py), not JSON examples; only JSON tasks "
                            "can be extracted")
        elif t not in found:
            close = difflib.get_close_matches(t, sorted(json_tasks), n=3)
            problems.append(f"{t} is not a BIG-bench task" + (f" (did you mean {', '.join(close)}?)" if close else ""))
    if problems:
        raise ConfigError("; ".join(problems), file=str(sdist))
    rows = {}
    for t in wanted:
        folder = out / t
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "task.json").write_bytes(found[t])
        rows[t] = convert(folder / "task.json", folder / "task.jsonl")
    return rows


def task_name(task: str) -> str:
    """The lm-eval task name qeval gives a BIG-bench task: bb_ and its last path part (bb_2_digit_addition)."""
    return "bb_" + task.strip("/").rsplit("/", 1)[-1]


def task_yaml(task: str, data: Path) -> str:
    """An lm-eval task over the extracted rows: multiple choice scored by loglikelihood where every example has
    scored choices, else a generated answer compared by exact match. A start: prompts and metrics are the
    task author's to adjust."""
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    head = (f"# BIG-bench {task}, written by `qeval data bigbench {task} --yaml`.\n# Data: the bigbench sdist on "
            f"PyPI, extracted into the qeval cache (never committed); {{qeval_data}} is filled in at run time.\n"
            f"task: {task_name(task)}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
            f'    test: "{{qeval_data}}/bigbench/{task}/task.jsonl"\ntest_split: test\n')
    if rows and all(r["choices"] for r in rows):
        body = ('output_type: multiple_choice\ndoc_to_text: "Q: {{input}}\\nA:"\ndoc_to_choice: "{{choices}}"\n'
                'doc_to_target: "{{gold}}"\nmetric_list:\n  - metric: acc\n    aggregation: mean\n'
                '    higher_is_better: true\n')
    else:
        body = ('output_type: generate_until\ndoc_to_text: "Q: {{input}}\\nA:"\ndoc_to_target: "{{target}}"\n'
                'generation_kwargs:\n  until: ["\\n", "Q:"]\n  max_gen_toks: 32\n  do_sample: false\n'
                '  temperature: 0.0\nmetric_list:\n  - metric: exact_match\n    aggregation: mean\n'
                '    higher_is_better: true\n    ignore_case: true\n    ignore_punctuation: true\n')
    return head + body + "metadata:\n  version: 1.0\n"


if __name__ == "__main__":
    sdist_arg, out_arg, *names = sys.argv[1:]  # no names: the tasks suites/lmeval/ reads
    for name, n in extract(Path(sdist_arg), Path(out_arg), names or list(SHIPPED)).items():
        print(name, n)
