"""lm-eval tasks against the variant's endpoint (`local-completions`), run in the engine venv.

lm-eval's per-sample log (`--log_samples`) becomes one record per doc, keyed by doc_id with its
doc_hash and prompt_hash, so variants pair exactly. `--use_cache` keeps every answered request in
SQLite, so a task killed half-way resumes where it stopped; the pipeline gives it one folder per checkpoint.

A multiple-choice task is scored the way its entry's `scoring` says, each way its own part: lm-eval's
loglikelihood (metrics `acc`, ...), and/or qeval's next-token scoring (workers/lmeval_next_token.py: one request
per question, single-token answers read from the next token's top-k; metric `acc_next_token`).
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import yaml

from ..engines import Endpoint
from ..engines.process import ServerProcess
from ..errors import ConfigError, EngineError, MissingEnvError
from ..hashing import file_hash, key_hash
from ..metrics import MetricSpec, indicator
from ..settings import Runtime
from ..store import Record
from .base import ItemSuite, Part, SuiteRun
from .spec import LmEvalSuiteRef

DATA_PLACEHOLDER = "{qeval_data}"
LOGLIKELIHOOD, NEXT_TOKEN = "loglikelihood", "next_token"
NEXT_TOKEN_METRIC = "acc_next_token"
NEXT_TOKEN_SPEC = indicator("qeval's next-token scoring: the choice whose one answer token is likeliest in one "
                            "next-token top-k, per question")
NEXT_TOKEN_WORKER = Path(__file__).resolve().parent.parent / "workers" / "lmeval_next_token.py"

# lm-eval's own metrics (lm_eval/api/metrics.py): which are per-sample 0/1 indicators, and lm-eval's
# `higher_is_better` for each; a task's metric_list may restate the direction, and overrides it
LMEVAL_METRICS: dict[str, tuple[bool, bool]] = {
    "acc": (True, True), "acc_norm": (True, True), "acc_mutual_info": (True, True), "exact_match": (True, True),
    "perplexity": (False, False), "word_perplexity": (False, False), "byte_perplexity": (False, False),
    "bits_per_byte": (False, False), "brier_score": (False, False), "ter": (False, False),
    "bleu": (False, True), "chrf": (False, True), "f1": (False, True), "mcc": (False, True),
    "likelihood": (False, True)}


class _TaskLoader(yaml.SafeLoader):
    """Reads a task YAML's metric_list: lm-eval's `!function` tags are kept as text, not run."""


_TaskLoader.add_multi_constructor("!", lambda loader, suffix, node: None)


def task_metrics(task: str, text: str | None, where: str) -> dict[str, MetricSpec]:
    """Each metric's declaration: lm-eval's for its own metric names, the task's `higher_is_better` on top."""
    out = {m: MetricSpec(binary=b, higher_is_better=h, source=f"lm-eval's {m}") for m, (b, h) in LMEVAL_METRICS.items()}
    try:
        doc = yaml.load(text, Loader=_TaskLoader) if text else None
    except yaml.YAMLError as e:
        raise ConfigError(f"task {task!r}: not valid YAML: {e}", file=where) from None
    for entry in (doc or {}).get("metric_list") or []:
        name = entry.get("metric") if isinstance(entry, dict) else None
        if not isinstance(name, str):
            continue
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
    scoring: str = LOGLIKELIHOOD  # LOGLIKELIHOOD: lm-eval's own; NEXT_TOKEN: qeval's (see the module's docstring)

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


def lmeval_argv(python: Path, ref: LmEvalSuiteRef, endpoint: Endpoint, tasks: list[str], include: Path | None,
                out: Path, cache: Path, samples: dict[str, list[int]] | None = None,
                next_token: tuple[Path, int] | None = None) -> list[str]:
    """lm-eval's command line; `next_token` (its flags file, its top-k): through qeval's next-token worker."""
    if endpoint.tokenizer is None:
        raise ConfigError(f"lm-eval needs a local tokenizer for variant {endpoint.model!r}")
    model_args = ",".join([
        f"model={endpoint.model}", f"base_url={endpoint.base_url}/completions",
        "tokenizer_backend=huggingface", f"tokenizer={endpoint.tokenizer}",
        f"num_concurrent={ref.num_concurrent}", "max_retries=5", f"add_bos_token={ref.add_bos_token}",
        "timeout=600", "seed=0",
    ])
    head = [str(python), "-m", "lm_eval", "--model", "local-completions"] if next_token is None else \
        [str(python), str(NEXT_TOKEN_WORKER), str(next_token[0]), str(next_token[1]), "--model", "qeval-next-token"]
    argv = [*head, "--model_args", model_args,
            "--tasks", ",".join(tasks), "--output_path", str(out), "--log_samples", "--use_cache", str(cache),
            "--batch_size", str(ref.batch_size), "--seed", f"0,1234,1234,{ref.fewshot_seed}"]
    if include is not None:
        argv += ["--include_path", str(include)]
    if samples is not None:  # lm-eval maps its k-th selected doc to samples[k] only if they are sorted
        argv += ["--samples", json.dumps({t: sorted(ix) for t, ix in samples.items()})]
    elif ref.limit:
        argv += ["--limit", str(ref.limit)]
    if ref.num_fewshot is not None:
        argv += ["--num_fewshot", str(ref.num_fewshot)]
    if ref.apply_chat_template:
        argv.append("--apply_chat_template")
    return argv


def _score(v: object) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def parse_samples(path: Path, flags: Mapping[str, dict] | None = None) -> list[Record]:
    """One lm-eval samples_*.jsonl -> records. Each metric key listed in `metrics` becomes a score. With `flags`
    (the next-token scoring's, by prompt hash): lm-eval's `acc` alone, as `acc_next_token`, and each record
    says how its question was scored (`next_token`, or `loglikelihood` where an answer was not one token) and
    how many of its choices were outside the top-k."""
    records = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            s = json.loads(line)
            scores = {m: _score(s[m]) for m in s["metrics"]}
        except (ValueError, KeyError, TypeError) as e:
            raise EngineError(f"{path}:{lineno}: not an lm-eval sample record ({e})") from None
        bad = [m for m, v in scores.items() if v is None]
        if bad:
            raise EngineError(f"{path}:{lineno}: metric(s) {bad} are not finite numbers")
        extra = {"target": str(s.get("target"))[:500]}
        if flags is not None:
            if "acc" not in scores:
                raise EngineError(f"{path}:{lineno}: the next-token scoring reads lm-eval's acc, and the sample has "
                                  f"only {sorted(scores)}")
            scores = {NEXT_TOKEN_METRIC: scores["acc"]}
            flag = flags.get(s.get("prompt_hash")) or {}
            extra.update(scoring=flag.get("scoring", "unknown"), outside_top_k=flag.get("outside_top_k", 0))
        resp = s.get("filtered_resps")
        records.append(Record(item_id=str(s["doc_id"]), scores=scores, prompt_hash=s.get("prompt_hash"),
                              doc_hash=s.get("doc_hash"), response=json.dumps(resp)[:2000], extra=extra))
    return records


def read_flags(path: Path) -> dict[str, dict]:
    """The next-token worker's flags file: per prompt hash, its latest entry (a later run's answers win)."""
    if not path.is_file():
        return {}
    out = {}
    for line in path.read_text(errors="replace").splitlines():
        try:
            x = json.loads(line)
            out[x["prompt_hash"]] = x
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a kill: the request is asked again and its flag written again
    return out


def run_lmeval(ref: LmEvalSuiteRef, tasks: list[LmEvalTask], endpoint: Endpoint, runtime: Runtime, data_dir: Path,
               work: Path, sink: Callable[[LmEvalTask, list[Record]], None], log_path: Path,
               samples: dict[str, list[int]] | None = None) -> None:
    """Run the given tasks in one lm-eval process per scoring, then hand each task's records to `sink`.
    `samples`: per task's part name (LmEvalTask.suite), the doc indices to evaluate (instead of the suite's limit)."""
    if not runtime.exists():
        raise MissingEnvError("the lm-eval environment", runtime.location)
    include = materialize_tasks(ref, data_dir, work)
    for scoring in dict.fromkeys(t.scoring for t in tasks):
        these = [t for t in tasks if t.scoring == scoring]
        # lm-eval's request cache answers a request by its text alone: each scoring keeps its own
        suffix = "" if scoring == LOGLIKELIHOOD else f"-{scoring}"
        out, cache = work / f"lmeval-out{suffix}", work / f"lmeval-cache{suffix}"
        flags = work / f"lmeval-cache{suffix}.flags.jsonl" if scoring == NEXT_TOKEN else None
        log = log_path.with_name(f"{log_path.stem}{suffix}{log_path.suffix}")
        argv = lmeval_argv(runtime.python, ref, endpoint, [t.name for t in these], include, out, cache,
                           None if samples is None else {t.name: samples[t.suite] for t in these if t.suite in samples},
                           next_token=None if flags is None else (flags, ref.next_token_top_k))
        _run_process(argv, runtime, work, endpoint, log)
        read = read_flags(flags) if flags is not None else None
        for t in these:
            files = sorted(out.rglob(f"samples_{t.name}_*.jsonl"), key=lambda p: p.stat().st_mtime)
            if not files:
                raise EngineError(f"lm-eval wrote no samples for task {t.name} (log: {log})", variant=endpoint.model)
            sink(t, parse_samples(files[-1], read))


def _run_process(argv: list[str], runtime: Runtime, work: Path, endpoint: Endpoint, log_path: Path) -> None:
    env = runtime.env(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_DATASETS_CACHE=str(work / "hf-datasets"))
    env.pop("OPENAI_API_KEY", None)
    if endpoint.api_key:  # local-completions reads its key from here; it never reaches argv or a log
        env["OPENAI_API_KEY"] = endpoint.api_key
    # its own process group, dying with qeval: Ctrl-C or a kill of qeval leaves no lm-eval running
    proc = ServerProcess(argv, env, log_path)
    rc = proc.run()
    if rc != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise EngineError(f"lm-eval exited with code {rc} (log: {log_path})", variant=endpoint.model, log_tail=tail)


def _lmeval_primary(include: Path | None, task: str) -> str:
    if include is not None:
        for p in include.glob("*.yaml"):
            spec = yaml.safe_load(p.read_text()) or {}
            if spec.get("task") == task and spec.get("metric_list"):
                return spec["metric_list"][0]["metric"]
    return "acc"


def _rows(data_dir: Path, include: Path | None, task: str) -> int | None:
    if include is None:
        return None
    for p in include.glob("*.yaml"):
        spec = yaml.safe_load(p.read_text()) or {}
        if spec.get("task") == task:
            files = (spec.get("dataset_kwargs") or {}).get("data_files") or {}
            f = Path(str(files.get(spec.get("test_split", "test"), "")).replace("{qeval_data}", str(data_dir)))
            if f.is_file():
                return sum(1 for line in f.read_text().splitlines() if line.strip())
    return None


def resolve(ref: LmEvalSuiteRef, settings, policy, config_file: str = "") -> "LmEvalSuite":
    """A campaign's `kind: lm_eval` entry: its tasks, each one a sequential gate reads cut at its looks (those
    of every rule that gates one of its metrics); lm-eval then runs it in those batches, for the baseline as
    for every variant. The docs they cut are counted by the data pre-flight (LmEvalSuite.counted). Each task is
    a part per scoring the entry names."""
    from ..verdict.rules import rule_for

    scored = [s for base in resolve_tasks(ref, settings.data, config_file)
              for s in ([base] if LOGLIKELIHOOD in ref.scoring else [])
              + ([base.next_token(ref.next_token_top_k)] if NEXT_TOKEN in ref.scoring else [])]
    out = []
    for t in scored:
        specs = {(seq.look_every, seq.min_items) for m in t.metrics
                 if (r := rule_for(policy, t.suite, m)) is not None
                 and (seq := policy.sequential_of(r)) is not None}
        if not specs:
            out.append(t)
            continue
        if ref.limit is None:
            raise ConfigError(f"lm-eval task {t.name}: a sequential gate reads it, which needs the suite's `limit` "
                              "(the docs the looks are planned over)", file=config_file, where="suites: lm_eval.limit")
        out.append(t.in_batches(tuple(sorted(specs))))
    return LmEvalSuite(ref, tuple(out))


def _shown(t: LmEvalTask) -> str:
    return t.suite.removeprefix("lm_eval/")


def counted(suites: tuple, n_docs: Mapping[str, int]) -> tuple:
    """The campaign's suites, its lm-eval ones with the docs each batched task's data has (counted)."""
    return tuple(s.counted(n_docs) if isinstance(s, LmEvalSuite) else s for s in suites)


def task_cuts(seed: int, key: str, pauses: tuple[int, ...], n: int) -> list[list[int]]:
    """A task's doc indices, in the seeded order, cut at its pauses: lm-eval's --samples per call. Fixed at
    plan time and the same for the baseline and every variant (few-shot prompts depend on them)."""
    from ..verdict.sequential import suite_order

    order, _ = suite_order([str(i) for i in range(n)], [None] * n, seed, key)
    edges = [0, *pauses]
    return [[int(i) for i in order[a:b]] for a, b in zip(edges, edges[1:]) if b > a]


@dataclass(frozen=True)
class LmEvalSuite(ItemSuite):
    """An `lm_eval` entry: its tasks, each a part per scoring, run together in one lm-eval process per scoring
    (a task that sequential gates read: in the batches its looks cut, one process per batch)."""

    ref: LmEvalSuiteRef
    tasks: tuple[LmEvalTask, ...]

    @property
    def parts(self) -> tuple[Part, ...]:
        return tuple(self._part(t) for t in self.tasks)

    @staticmethod
    def _part(t: LmEvalTask) -> Part:
        # its primary metric is known from its records; the ones its metric_list names, now
        if t.scoring == NEXT_TOKEN:
            return Part(suite=t.suite, key=t.key, metrics=t.metrics, primary=NEXT_TOKEN_METRIC,
                        planned=(NEXT_TOKEN_METRIC,), needs_prompt_logprobs=False, needs_token_prompts=True)
        planned = tuple(m for m, spec in t.metrics.items() if spec.source.startswith("task "))
        return Part(suite=t.suite, key=t.key, metrics=t.metrics, planned=planned,
                    needs_prompt_logprobs=t.needs_prompt_logprobs, needs_token_prompts=True)

    @property
    def concurrency(self) -> int:
        return self.ref.num_concurrent

    def tally(self) -> dict[str, int]:
        return {"lm-eval tasks": len({t.name for t in self.tasks})}

    def sizes(self, data_dir: Path) -> list[tuple[str, str, int, tuple[str, ...]]]:
        out = []
        for t in self.tasks:
            rows, limit = _rows(data_dir, self.ref.include_path, t.name), self.ref.limit
            n = min(x for x in (rows, limit) if x is not None) if (rows or limit) else 0
            metric = NEXT_TOKEN_METRIC if t.scoring == NEXT_TOKEN else _lmeval_primary(self.ref.include_path, t.name)
            out.append((t.suite, metric, n, ()))
        return out

    def counted(self, n_docs: Mapping[str, int]) -> "LmEvalSuite":
        """With the docs each batched task's data has (the data pre-flight's count, by unbatched key): a task
        with fewer docs than its limit is cut over the docs it has."""
        return dataclasses.replace(self, tasks=tuple(
            dataclasses.replace(t, n_docs=n_docs.get(t.unbatched_key)) if t.looks else t for t in self.tasks))

    def run(self, run: SuiteRun) -> None:
        """The tasks the store lacks, in one lm-eval process per scoring; a task that sequential gates read in its
        batches (lm-eval's --samples, the same calls for the baseline and every variant, so that few-shot prompts
        match), one process per batch, until its gates are decided."""
        ref = self.ref.model_copy(update={"num_concurrent": run.concurrency}) if run.concurrency else self.ref
        parts = {t.suite: self._part(t) for t in self.tasks}
        todo = [t for t in self.tasks if not run.is_complete(parts[t.suite]) and not run.skip(parts[t.suite])]
        if not todo:
            return
        cuts = {t.suite: task_cuts(run.seed, t.key, t.batches, t.planned_docs) if t.batches else None for t in todo}
        used: dict[str, set[str]] = {t.suite: set(run.done_ids(parts[t.suite])) for t in todo}

        def task_sink(t: LmEvalTask, recs: list[Record]) -> None:
            run.put(parts[t.suite], recs)
            used[t.suite] |= {r.item_id for r in recs}
            if cuts[t.suite] is None:
                run.complete(parts[t.suite], len(recs))
            if t.scoring == NEXT_TOKEN:
                outside = sum(1 for r in recs if r.extra.get("outside_top_k"))
                fell_back = sum(1 for r in recs if r.extra.get("scoring") == LOGLIKELIHOOD)
                if outside or fell_back:
                    run.log(f"[{run.variant}] {t.suite}: of {len(recs)} questions, {outside} had a choice outside "
                            f"the top {ref.next_token_top_k} (scored below every listed token), {fell_back} an "
                            "answer of more than one token (scored by lm-eval's loglikelihood)")

        # lm-eval's request cache answers a request it has seen whatever now serves it: one folder per checkpoint
        # (run.work is the variant key's), so a variant re-made under its name is asked again, a resumed one not
        runtime, data, v = run.settings.vllm, run.settings.data, run.variant
        plain = [t for t in todo if cuts[t.suite] is None]
        if plain:
            with run.step(f"[{v}] lm-eval {', '.join(_shown(t) for t in plain)}"):
                run_lmeval(ref, plain, run.endpoint, runtime, data, run.work, task_sink, run.logs / f"lmeval-{v}.log")
            for t in plain:
                run.finished(parts[t.suite])
        going = [t for t in todo if cuts[t.suite] is not None]
        for k in range(max((len(cuts[t.suite]) for t in going), default=0)):
            if run.stopping():
                going = [t for t in going if not run.skip(parts[t.suite])]
            samples = {t.suite: sorted(i for i in cuts[t.suite][k] if str(i) not in used[t.suite])
                       for t in going if k < len(cuts[t.suite])}
            batch = [t for t in going if samples.get(t.suite)]
            if batch:
                with run.step(f"[{v}] lm-eval {', '.join(_shown(t) for t in batch)} (batch {k + 1})"):
                    run_lmeval(ref, batch, run.endpoint, runtime, data, run.work / f"batch-{k + 1}", task_sink,
                               run.logs / f"lmeval-{v}-batch-{k + 1}.log",
                               samples={t.suite: samples[t.suite] for t in batch})
            for t in [t for t in going if k < len(cuts[t.suite])]:
                if k == len(cuts[t.suite]) - 1 or run.look(parts[t.suite]):
                    run.complete(parts[t.suite], len(used[t.suite]))
                    run.finished(parts[t.suite])
                    going.remove(t)
