"""lm-eval tasks against the variant's endpoint (`local-completions`), run in the engine venv.

lm-eval runs in one process per variant, suite and scoring, kept across a sequential gate's batches
(lmeval_session.py: lm-eval imported and its tasks built once, each batch a call). lm-eval's per-sample log
(`--log_samples`) becomes one record per doc, keyed by doc_id with its doc_hash and prompt_hash, so variants pair
exactly. `--use_cache` keeps every answered request in SQLite, so a task killed half-way resumes where it stopped;
the pipeline gives it one folder per checkpoint.
What a task is (its file, data and key) lives in lmeval_tasks.py; the check of its data before any engine
starts in lmeval_preflight.py.

A multiple-choice task is scored the way its entry's `scoring` says, each way its own part: lm-eval's
loglikelihood (metrics `acc`, ...), and/or qeval's next-token scoring (workers/lmeval_next_token.py: one request
per question, single-token answers read from the next token's top-k; metric `acc_next_token`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

import yaml

from ..engines import Endpoint
from ..errors import ConfigError, EngineError, MissingEnvError
from ..imports.base import BadResults
from ..imports.lmeval import read_samples
from ..settings import Runtime, Settings
from ..record.store import Record
from .base import Checked, InFlight, ItemSuite, Part, SuiteRun, requests_in_flight
from .lmeval_preflight import DataRun, start_check
from .lmeval_session import STOP_WAIT_S, Call, LmEvalSession
from .lmeval_tasks import (LOGLIKELIHOOD, NEXT_TOKEN, NEXT_TOKEN_METRIC, LmEvalTask, materialize_tasks,
                           resolve_tasks)
from .spec import LmEvalSuiteRef

DEFAULT_CONCURRENCY = 4  # num_concurrent where `auto` finds an engine that cannot say
LMEVAL_MAX_LENGTH = 2048  # local-completions' max_length: the most tokens of one request, prompt and generation
NEXT_TOKEN_WORKER = Path(__file__).resolve().parent.parent / "workers" / "lmeval_next_token.py"

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


def parse_samples(path: Path, flags: Mapping[str, dict] | None = None) -> list[Record]:
    """One lm-eval samples_*.jsonl -> records, one per doc (imports/lmeval.py: the parser qeval reads lm-eval's
    output with, its own or a team's). With `flags` (the next-token scoring's, by prompt hash): lm-eval's `acc`
    alone, as `acc_next_token`, and each record says how its question was scored (`next_token`, or
    `loglikelihood` where an answer was not one token) and how many of its choices were outside the top-k."""
    try:
        records = read_samples(path)
    except BadResults as e:  # lm-eval, run by qeval, wrote what qeval cannot read: not the user's input
        raise EngineError(f"lm-eval's output: {e}") from None
    if flags is None:
        return records
    out = []
    for r in records:
        if "acc" not in r.scores:
            raise EngineError(f"{path.parent / r.extra['at']}: the next-token scoring reads lm-eval's acc, and the "
                              f"sample has only {sorted(r.scores)}")
        flag = flags.get(r.prompt_hash) or {}
        out.append(dataclasses.replace(r, scores={NEXT_TOKEN_METRIC: r.scores["acc"]}, extra={
            **r.extra, "scoring": flag.get("scoring", "unknown"), "outside_top_k": flag.get("outside_top_k", 0)}))
    return out


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


class LmEvalSessions:
    """The kept lm-eval processes of one variant's suite, one per scoring (each its own model client), each started
    at its first call and kept until `close`: lm-eval is imported and its tasks built once, however many batches
    a sequential gate asks for (lmeval_session.py)."""

    def __init__(self, ref: LmEvalSuiteRef, endpoint: Endpoint, runtime: Runtime, data_dir: Path, work: Path,
                 log_path: Path):
        if not runtime.exists():
            raise MissingEnvError("the lm-eval environment", runtime.location)
        self.ref, self.endpoint, self.runtime, self.work, self.log_path = ref, endpoint, runtime, work, log_path
        self.include = materialize_tasks(ref, data_dir, work)
        self.open: dict[str, LmEvalSession] = {}

    def __enter__(self) -> "LmEvalSessions":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(grace_s=0.0 if exc is not None else STOP_WAIT_S)  # unwinding: no wait for a call to end

    def of(self, scoring: str, tasks: list[str]) -> LmEvalSession:
        if scoring not in self.open:
            suffix = _suffix(scoring)
            work = self.work
            args = lmeval_argv(self.runtime.python, self.ref, self.endpoint, tasks, self.include,
                               work / f"lmeval-out{suffix}", work / f"lmeval-cache{suffix}")[3:]
            if scoring == NEXT_TOKEN:
                args[args.index("--model") + 1] = "qeval-next-token"
            log = self.log_path.with_name(f"{self.log_path.stem}{suffix}{self.log_path.suffix}")
            self.open[scoring] = LmEvalSession(
                self.runtime.python, args, _env(self.runtime, self.work, self.endpoint), log, self.endpoint.model,
                next_token_top_k=self.ref.next_token_top_k if scoring == NEXT_TOKEN else None)
        return self.open[scoring]

    def close(self, grace_s: float = STOP_WAIT_S) -> None:
        for s in self.open.values():
            s.close(grace_s=grace_s)
        self.open.clear()


def _suffix(scoring: str) -> str:
    # lm-eval's request cache answers a request by its text alone: each scoring keeps its own
    return "" if scoring == LOGLIKELIHOOD else f"-{scoring}"


def run_lmeval(ref: LmEvalSuiteRef, tasks: list[LmEvalTask], endpoint: Endpoint, runtime: Runtime, data_dir: Path,
               work: Path, sink: Callable[[LmEvalTask, list[Record]], None], log_path: Path,
               samples: dict[str, list[int]] | None = None, sessions: LmEvalSessions | None = None) -> None:
    """Run the given tasks, one lm-eval call per scoring, then hand each task's records to `sink`. `samples`: per
    task's part name (LmEvalTask.suite), the doc indices to evaluate (instead of the suite's limit). `work` holds
    the call's output and request cache; `sessions`: the kept lm-eval processes to ask (None: started for this
    call alone, logging to `log_path`, and ended with it)."""
    if sessions is None:
        with LmEvalSessions(ref, endpoint, runtime, data_dir, work, log_path) as own:
            return run_lmeval(ref, tasks, endpoint, runtime, data_dir, work, sink, log_path, samples, own)
    for scoring in dict.fromkeys(t.scoring for t in tasks):
        these = [t for t in tasks if t.scoring == scoring]
        suffix = _suffix(scoring)
        out, cache = work / f"lmeval-out{suffix}", work / f"lmeval-cache{suffix}"
        flags = work / f"lmeval-cache{suffix}.flags.jsonl" if scoring == NEXT_TOKEN else None
        session = sessions.of(scoring, [t.name for t in these])
        session.evaluate(Call(tasks=tuple(t.name for t in these), out=out, cache=cache, flags=flags,
                              samples=None if samples is None else
                              {t.name: samples[t.suite] for t in these if t.suite in samples},
                              limit=ref.limit if samples is None else None))
        read = read_flags(flags) if flags is not None else None
        for t in these:
            files = sorted(out.rglob(f"samples_{t.name}_*.jsonl"), key=lambda p: p.stat().st_mtime)
            if not files:
                raise EngineError(f"lm-eval wrote no samples for task {t.name} (log: {session.log_path})",
                                  variant=endpoint.model)
            sink(t, parse_samples(files[-1], read))


def _env(runtime: Runtime, work: Path, endpoint: Endpoint) -> dict[str, str]:
    env = runtime.env(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", HF_DATASETS_CACHE=str(work / "hf-datasets"))
    env.pop("OPENAI_API_KEY", None)
    if endpoint.api_key:  # local-completions reads its key from here; it never reaches argv or a log
        env["OPENAI_API_KEY"] = endpoint.api_key
    return env


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
    (a task that sequential gates read: in the batches its looks cut, one call of that process per batch)."""

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
        return DEFAULT_CONCURRENCY if self.ref.num_concurrent == "auto" else self.ref.num_concurrent

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

    @staticmethod
    def preflight(suites: Sequence["LmEvalSuite"], settings: Settings, config_file: str = "",
                  runs_here: bool = True) -> "_Preflight":
        """Every task of the campaign's lm-eval suites built and its docs read, in the engine's environment,
        offline, in one process (lmeval_preflight.py); each suite then knows the docs its batched tasks have."""
        return _Preflight(tuple(suites), start_check([(s.ref, [t.unbatched for t in s.tasks]) for s in suites],
                                                     settings, config_file, runs_here))

    def counted(self, n_docs: Mapping[str, int]) -> "LmEvalSuite":
        """With the docs each batched task's data has (the data pre-flight's count, by unbatched key): a task
        with fewer docs than its limit is cut over the docs it has."""
        return dataclasses.replace(self, tasks=tuple(
            dataclasses.replace(t, n_docs=n_docs.get(t.unbatched_key)) if t.looks else t for t in self.tasks))

    def run(self, run: SuiteRun) -> None:
        """The tasks the store lacks, in one lm-eval process per scoring kept for the whole run; a task that
        sequential gates read in its batches (lm-eval's --samples, the same calls for the baseline and every
        variant, so that few-shot prompts match), one call of that process per batch, until its gates are
        decided."""
        parts = {t.suite: self._part(t) for t in self.tasks}
        todo = [t for t in self.tasks if not run.is_complete(parts[t.suite]) and not run.skip(parts[t.suite])]
        if not todo:
            return
        # one request is at most lm-eval's max_length tokens, prompt and generation together (it cuts the prompt)
        how = InFlight.of(self.ref.num_concurrent, self.ref.max_concurrency, fallback=DEFAULT_CONCURRENCY)
        n = requests_in_flight(run, how, [parts[t.suite] for t in todo], LMEVAL_MAX_LENGTH, 0)
        ref = self.ref.model_copy(update={"num_concurrent": n})
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
        with LmEvalSessions(ref, run.endpoint, runtime, data, run.work, run.logs / f"lmeval-{v}.log") as sessions:
            plain = [t for t in todo if cuts[t.suite] is None]
            if plain:
                with run.step(f"[{v}] lm-eval {', '.join(_shown(t) for t in plain)}"):
                    run_lmeval(ref, plain, run.endpoint, runtime, data, run.work, task_sink, sessions.log_path,
                               sessions=sessions)
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
                    # the kept lm-eval of this suite answers the batch; its output and request cache are the batch's
                    with run.step(f"[{v}] lm-eval {', '.join(_shown(t) for t in batch)} (batch {k + 1})"):
                        run_lmeval(ref, batch, run.endpoint, runtime, data, run.work / f"batch-{k + 1}", task_sink,
                                   sessions.log_path, samples={t.suite: samples[t.suite] for t in batch},
                                   sessions=sessions)
                for t in [t for t in going if k < len(cuts[t.suite])]:
                    if k == len(cuts[t.suite]) - 1 or run.look(parts[t.suite]):
                        run.complete(parts[t.suite], len(used[t.suite]))
                        run.finished(parts[t.suite])
                        going.remove(t)


class _Preflight:
    """The lm-eval suites' data check under way (suites/base.py: Preflight)."""

    def __init__(self, suites: tuple[LmEvalSuite, ...], check: DataRun):
        self.suites, self.check = suites, check

    def result(self) -> Checked:
        data = self.check.result()
        return Checked(tuple(s.counted(data.n_docs) for s in self.suites), data.summary())

    def close(self) -> None:
        self.check.close()
