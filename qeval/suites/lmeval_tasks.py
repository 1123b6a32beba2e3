"""What an lm-eval task is to qeval: its YAML in the suite's include path, the local data files it reads, its key
(the YAML, every data file's hash and each setting that changes results), its declared metrics, and the copy of
the YAMLs lm-eval reads (the data folder filled in, relative data files made absolute)."""

from __future__ import annotations

import dataclasses
import glob
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from ..errors import ConfigError, MissingEnvError
from ..hashing import file_hash, key_hash
from ..imports.lmeval import CORPUS_METRICS, LMEVAL_METRICS, PER_ITEM_AGGREGATION, not_per_item
from ..record.metrics import MetricSpec, indicator
from ..settings import Settings
from .spec import LmEvalSuiteRef, Needed

DATA_PLACEHOLDER = "{qeval_data}"
LOGLIKELIHOOD, NEXT_TOKEN = "loglikelihood", "next_token"
NEXT_TOKEN_METRIC = "acc_next_token"
NEXT_TOKEN_SPEC = indicator("qeval's next-token scoring: the choice whose one answer token is likeliest in one "
                            "next-token top-k, per question")

class _TaskLoader(yaml.SafeLoader):
    """Reads a task YAML's metric_list: lm-eval's `!function` tags are kept as text, not run."""


_TaskLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def task_metrics(task: str, text: str | None, where: str) -> dict[str, MetricSpec]:
    """Each metric's declaration: lm-eval's for its own per-item metrics, the task's `higher_is_better` on top. A
    metric the task's metric_list aggregates other than by a mean (lm-eval's corpus metrics: perplexity, bleu, f1)
    has no per-item score to pair: refused, naming it."""
    out = {m: MetricSpec(binary=b, higher_is_better=h, source=f"lm-eval's {m}") for m, (b, h) in LMEVAL_METRICS.items()}
    try:
        doc = yaml.load(text, Loader=_TaskLoader) if text else None
    except yaml.YAMLError as e:
        raise ConfigError(f"task {task!r}: not valid YAML: {e}", file=where) from None
    for entry in (doc or {}).get("metric_list") or []:
        name = entry.get("metric") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
        aggregation = entry.get("aggregation", CORPUS_METRICS.get(name, PER_ITEM_AGGREGATION))
        if aggregation != PER_ITEM_AGGREGATION:
            raise ConfigError(not_per_item(task, name, str(aggregation)), file=where, where=f"metric_list: {name}")
        known = out.get(name)
        hib = entry.get("higher_is_better", known.higher_is_better if known else None)
        out[name] = MetricSpec(binary=known.binary if known else False, higher_is_better=hib,
                               source=f"task {task}'s metric_list" + ("" if known else ", continuous: not an lm-eval 0/1 metric"))
    return out


@dataclass(frozen=True)
class LmEvalTask:
    name: str
    key: str  # hash of the task file, its data and every setting that changes results
    settings: dict
    output_type: str | None = None  # from the task YAML; None for a task lm-eval knows by name
    metrics: dict[str, MetricSpec] = field(default_factory=dict)  # what each metric is (task_metrics)
    # sequential gates: each (look_every, min_items) its gates look by. The task then runs in batches
    # (lm-eval's --samples), and its few-shot prompts depend on them (lm-eval draws examples from one
    # seeded stream in doc order), so they are part of its key
    looks: tuple[tuple[int, int], ...] = ()
    # the key before the batches or a scoring other than lm-eval's entered it (what the data pre-flight keys by)
    unbatched_key: str = ""
    n_docs: int | None = None  # the docs its data has, where the pre-flight counted them
    scoring: str = LOGLIKELIHOOD  # LOGLIKELIHOOD: lm-eval's own; NEXT_TOKEN: qeval's (suites/lmeval.py says how)

    @property
    def suite(self) -> str:
        """Its part's name: the next-token scoring of a task is a part of its own beside lm-eval's."""
        return f"lm_eval/{self.name}" + ("" if self.scoring == LOGLIKELIHOOD else f"/{self.scoring}")

    def next_token(self, top_k: int) -> "LmEvalTask":
        """The task scored by qeval's next-token path: its records under their own key, its one metric declared."""
        return dataclasses.replace(self, scoring=NEXT_TOKEN, key=f"{self.key}:{NEXT_TOKEN}-top{top_k}",
                                   unbatched_key=self.unbatched_key or self.key,
                                   metrics={NEXT_TOKEN_METRIC: NEXT_TOKEN_SPEC})

    def in_batches(self, looks: tuple[tuple[int, int], ...]) -> "LmEvalTask":
        return dataclasses.replace(self, looks=looks, unbatched_key=self.unbatched_key or self.key,
                                   key=f"{self.key}:b{key_hash([list(x) for x in looks], 8)}")

    @property
    def unbatched(self) -> "LmEvalTask":
        """The task as its data is read, before batches or a scoring entered its key (what the data pre-flight
        keys by)."""
        return dataclasses.replace(self, key=self.unbatched_key, looks=(), unbatched_key="",
                                   scoring=LOGLIKELIHOOD) if self.unbatched_key else self

    @property
    def planned_docs(self) -> int | None:
        """The docs the looks are planned over: the suite's limit, or fewer where the data has fewer."""
        limit = self.settings.get("limit")
        return min(limit, self.n_docs) if limit and self.n_docs else (limit or self.n_docs)

    @property
    def batches(self) -> tuple[int, ...]:
        """The doc counts after which its gates look (empty: not cut)."""
        from ..stats.sequential import look_schedule

        n = self.planned_docs
        if not self.looks or not n:
            return ()
        return tuple(sorted({t for every, first in self.looks for t in look_schedule(n, every, first)}))

    @property
    def needs_prompt_logprobs(self) -> bool:
        # scored from the logprobs of given continuations; an unknown task is assumed to be. The next-token
        # scoring asks none (an answer of several tokens falls back to lm-eval's path, which does)
        return self.output_type != "generate_until" and self.scoring == LOGLIKELIHOOD


def _task_file(include: Path | None, task: str) -> Path | None:
    if include is None:
        return None
    for p in sorted(include.glob("*.yaml")):
        for line in p.read_text().splitlines():
            if line.strip() == f"task: {task}":
                return p
    return None


def _data_files(task_file: Path, data_dir: Path) -> list[Path]:
    """The local files a task's dataset_kwargs.data_files name: {qeval_data} filled in, a relative path taken
    against the YAML's own folder, a glob (`*.arrow`: a dataset saved in shards) expanded, in order."""
    try:
        spec = yaml.load(task_file.read_text(), Loader=_TaskLoader) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"not valid YAML: {e}", file=str(task_file)) from None
    out = []
    for x in _flat_data_files(spec):
        if "://" in x:
            raise ConfigError(f"data file {x} is remote: qeval cannot download; provide it as a local file (see "
                              "docs/guides/suites-and-tasks.md, 'Adding a task of your own')", file=str(task_file),
                              where="dataset_kwargs.data_files")
        path = task_file.parent / x.replace(DATA_PLACEHOLDER, str(data_dir))  # an absolute one stays as it is
        matched = sorted(path.parent.glob(path.name)) if glob.has_magic(path.name) and path.parent.is_dir() else []
        out += matched or [path]
    return out


def _flat_data_files(spec: object) -> list[str]:
    files = ((spec.get("dataset_kwargs") or {}).get("data_files") or {}) if isinstance(spec, dict) else {}
    values = files.values() if isinstance(files, dict) else [files]
    return [str(x) for v in values for x in (v if isinstance(v, list) else [v])]


def _absolute_data_files(text: str, folder: Path) -> str:
    """The task YAML with each relative data_files entry made absolute against `folder`, its own: lm-eval reads
    a copy in another folder, and `datasets` takes a relative path against the working directory. Read and
    written as YAML nodes, so lm-eval's `!function` tags come through; a YAML with none is returned as it is."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)

    def child(node, key: str):
        if isinstance(node, yaml.MappingNode):
            return next((v for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == key), None)
        return None

    def scalars(node) -> list:
        if isinstance(node, yaml.ScalarNode):
            return [node]
        if isinstance(node, (yaml.SequenceNode, yaml.MappingNode)):
            return [s for n in node.value for s in scalars(n[1] if isinstance(n, tuple) else n)]
        return []

    relative = [s for s in scalars(child(child(root, "dataset_kwargs"), "data_files"))
                if "://" not in s.value and not Path(s.value).is_absolute()]
    if not relative:
        return text
    for s in relative:
        s.value, s.style = str(folder / s.value), '"'
    return yaml.serialize(root, Dumper=yaml.SafeDumper, allow_unicode=True, width=10_000)


def materialize_tasks(ref: LmEvalSuiteRef, data_dir: Path, work: Path) -> Path | None:
    """Copy the local task YAMLs with the data folder filled in and relative data files made absolute (against
    each YAML's own folder), so lm-eval reads absolute paths."""
    if ref.include_path is None:
        return None
    out = work / "lmeval-tasks"
    out.mkdir(parents=True, exist_ok=True)
    for p in sorted(ref.include_path.glob("*.yaml")):
        text = p.read_text().replace(DATA_PLACEHOLDER, str(data_dir))
        try:
            text = _absolute_data_files(text, p.parent.resolve())
        except yaml.YAMLError:
            pass  # lm-eval cannot read it either; resolve_tasks names the file where a task needs it
        (out / p.name).write_text(text)
    for p in sorted(ref.include_path.glob("*.py")):  # what a YAML's `!function utils.f` imports, beside it
        shutil.copyfile(p, out / p.name)
    return out


def resolve_tasks(ref: LmEvalSuiteRef, data_dir: Path, config_file: str = "") -> list[LmEvalTask]:
    settings = {"limit": ref.limit, "num_fewshot": ref.num_fewshot, "fewshot_seed": ref.fewshot_seed,
                "add_bos_token": ref.add_bos_token, "apply_chat_template": ref.apply_chat_template}
    tasks = []
    for name in ref.tasks:
        f = _task_file(ref.include_path, name)
        content = {"task": name, "settings": settings}
        output_type, text = None, None
        if f is not None:
            text = f.read_text()
            content["yaml"] = text
            output_type = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                                if line.startswith("output_type:")), None)
            if NEXT_TOKEN in ref.scoring:
                _check_next_token(name, output_type, text, str(f), config_file)
            hashes = {}
            for data in _data_files(f, data_dir):  # the data behind the task is part of its identity
                roots = (data_dir.resolve(), f.parent.resolve())
                if not any(data.resolve().is_relative_to(r) for r in roots):  # e.g. "../../etc/x" or /home/...
                    raise ConfigError(f"task {name!r} reads {data}, outside the data folder ({data_dir}) and the "
                                      f"task's own folder", file=str(f), where="dataset_kwargs.data_files")
                if not data.is_file():
                    raise MissingEnvError(f"data for lm-eval task {name!r}", str(data))
                # keyed by file name (what the shipped tasks' keys hold); a second file of that name (a saved
                # dataset's shards, one per split) by its path
                hashes[data.name if data.name not in hashes else os.path.relpath(data, f.parent)] = file_hash(data)
            content["data"] = hashes
            if "!function" in text:  # its code decides its prompts and scores too
                content["code"] = {py.name: file_hash(py) for py in sorted(f.parent.glob("*.py"))}
        elif ref.include_path is not None:
            raise ConfigError(f"task {name!r} is not in {ref.include_path} (it may still be an lm-eval built-in,"
                              " but qeval runs lm-eval offline: a task's data must be local files)",
                              file=config_file, where="suites: lm_eval.tasks")
        elif NEXT_TOKEN in ref.scoring:
            _check_next_token(name, None, None, None, config_file)
        tasks.append(LmEvalTask(name=name, key=f"lm_eval:{name}:{key_hash(content)}", settings=settings,
                                output_type=output_type, metrics=task_metrics(name, text, str(f or config_file))))
    return tasks




def _check_next_token(task: str, output_type: str | None, text: str | None, task_file: str | None,
                      config_file: str) -> None:
    """The next-token scoring reads a multiple-choice task's choices from one next-token top-k, and lm-eval's `acc`
    of that: a task of another kind, or one whose metric_list leaves `acc` out, is refused before anything runs."""
    where = "suites: lm_eval.scoring"
    if output_type != "multiple_choice":
        what = f"output_type {output_type}" if output_type else "no local task YAML that says its output_type"
        raise ConfigError(f"scoring next_token scores multiple-choice answers, and task {task!r} has {what}"
                          + (f" ({task_file})" if task_file else ""), file=config_file, where=where)
    try:
        doc = yaml.load(text, Loader=_TaskLoader) if text else None
    except yaml.YAMLError:
        return  # task_metrics names the file
    names = [e.get("metric") for e in (doc or {}).get("metric_list") or [] if isinstance(e, dict)]
    if names and "acc" not in names:
        raise ConfigError(f"scoring next_token reads lm-eval's acc, and task {task!r}'s metric_list has {names} "
                          f"({task_file})", file=config_file, where=where)


def data_needs(ref: LmEvalSuiteRef, settings: Settings, config_file: str = "") -> list[Needed]:
    """An lm-eval entry's data files on this machine (LmEvalSuiteRef.needs): its tasks' files, found or not."""
    what = f"lm-eval data ({', '.join(ref.tasks)})"
    try:
        tasks = resolve_tasks(ref, settings.data, config_file)
    except MissingEnvError as e:
        return [Needed(what, False, str(e))]
    return [Needed(what, True, f"{len(tasks)} tasks' files here")]
