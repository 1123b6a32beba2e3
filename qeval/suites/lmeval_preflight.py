"""The lm-eval suites' pre-flight (LmEvalSuite.preflight): before any engine starts, every lm-eval task is built
and its docs read here, in the engine's environment, offline, with no server (qeval/workers/check_lmeval_tasks.py).
A task whose data is not on this machine is bad input (exit 2) that names what to provide, found in seconds rather
than when lm-eval first runs.

A task that passed is remembered under the qeval cache by its key, which holds the task YAML and the hash of
every local data file it reads, with the engine build and lm-eval's version: a change to any of them checks it
again. The hash check alone (resolve_tasks) is not enough to skip the build: a file that exists may still not
be what the YAML reads (a split named differently, parquet read as json, a column the template lacks).
What a key does not cover (a cache_dir a task's YAML names) is trusted once it has loaded.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ..engines.process import INTERRUPT_GRACE_S, ServerProcess
from ..errors import ConfigError, EngineError, MissingEnvError, QevalError
from ..hashing import key_hash, stable_hash
from ..settings import Settings
from .lmeval_tasks import LmEvalTask, _task_file, materialize_tasks
from .spec import LmEvalSuiteRef

WORKER = Path(__file__).resolve().parent.parent / "workers" / "check_lmeval_tasks.py"
# what run_lmeval gives lm-eval: the check reads data the way the run will
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
ADD_A_TASK = "see docs/guides/suites-and-tasks.md, 'Adding a task of your own'"


@dataclass(frozen=True)
class DataCheck:
    checked: tuple[str, ...] = ()  # built and read just now
    cached: tuple[str, ...] = ()  # passed before on this machine under the same key
    seconds: float = 0.0
    skipped: str | None = None  # why nothing was checked here
    n_docs: dict[str, int] = field(default_factory=dict)  # per (unbatched) task key: the docs its data has

    def summary(self) -> str:
        if self.skipped:
            return f"lm-eval data: not checked here ({self.skipped})"
        n = len(self.checked) + len(self.cached)
        tasks = f"{n} task loads" if n == 1 else f"{n} tasks load"
        return (f"lm-eval data: {tasks} here, offline ({len(self.checked)} checked in {self.seconds:.1f} s, "
                f"{len(self.cached)} passed before)")


def _marker(settings: Settings, task: LmEvalTask) -> Path:
    runtime = settings.vllm
    key = {"task": task.key, "env": runtime.name, "lm_eval": runtime.version_of("lm_eval"),
           "datasets": runtime.version_of("datasets"), "worker": stable_hash(WORKER.read_text())}
    return settings.cache / "preflight" / f"{key_hash(key)}.json"


def _remember(path: Path, task: LmEvalTask, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"task": task.name, "key": task.key, "n_docs": result.get("n_docs"),
                               "checked_at": time.time()}))
    tmp.replace(path)  # atomic: two campaigns checking the same task at once both leave a whole file


def _problem(name: str, res: dict, task_file: Path | None) -> str:
    where = f" ({task_file})" if task_file else ""
    if res.get("problem") == "missing":
        ds = f" ({res['dataset']})" if res.get("dataset") else ""
        provide = ("make its data_files local files that exist here" if task_file else
                   "provide it as local data files (a task YAML in include_path whose dataset_kwargs.data_files "
                   "name them)")
        return (f"lm-eval task {name!r}{where}: its dataset{ds} is not on this machine, and qeval cannot download; "
                f"{provide}, {ADD_A_TASK}")
    if res.get("problem") == "unknown":
        close = res.get("close") or []
        hint = f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
        return f"lm-eval task {name!r}: lm-eval has no such task{hint}"
    return f"lm-eval task {name!r}{where} does not load: {res.get('error', '?')}"


class DataRun:
    """One run of the worker over the tasks not yet known good; started before the rest of the campaign's
    checks so that the two overlap, and never raising until `result`: the campaign's own errors come first."""

    def __init__(self, groups: Sequence[tuple[LmEvalSuiteRef, Sequence[LmEvalTask]]], settings: Settings,
                 config_file: str, required: bool):
        self.settings, self.config_file, self.required = settings, config_file, required
        self.todo: list[tuple[LmEvalSuiteRef, list[LmEvalTask]]] = []
        self.cached: list[str] = []
        self.markers: dict[str, Path] = {}
        self.files: dict[str, Path | None] = {}  # by task key: its YAML in the include path
        self.error: QevalError | None = None
        self.proc: ServerProcess | None = None
        self.work: Path | None = None
        self.start = time.monotonic()
        try:
            self._spawn(groups)
        except QevalError as e:
            self.error = e
        except BaseException:
            self.close()
            raise

    def _spawn(self, groups: Sequence[tuple[LmEvalSuiteRef, Sequence[LmEvalTask]]]) -> None:
        for ref, tasks in groups:
            new = []
            for t in tasks:  # unbatched: how a task is cut for sequential gates does not change what it reads
                self.markers[t.key] = _marker(self.settings, t)
                if self.markers[t.key].is_file():
                    self.cached.append(t.name)
                else:
                    new.append(t)
            if new:
                self.todo.append((ref, new))
        runtime = self.settings.vllm
        if not self.todo or not runtime.exists():
            return
        self.work = Path(tempfile.mkdtemp(prefix="qeval-preflight-"))
        asked = []
        for i, (ref, tasks) in enumerate(self.todo):
            include = materialize_tasks(ref, self.settings.data, self.work / f"suite{i}")
            for t in tasks:
                self.files[t.key] = _task_file(ref.include_path, t.name)
            asked.append({"include_path": str(include) if include else None, "tasks": [t.name for t in tasks],
                           "files": {t.name: str(include / f.name) for t in tasks
                                     if include and (f := self.files[t.key]) is not None}})
        spec = self.work / "spec.json"
        spec.write_text(json.dumps({"groups": asked}))
        env = runtime.env(os.environ, **OFFLINE, HF_DATASETS_CACHE=str(self.work / "hf-datasets"))
        self.proc = ServerProcess([str(runtime.python), str(WORKER), str(spec), str(self.work / "out.json")], env,
                                  self.work / "check.log")
        self.proc.spawn()

    def result(self) -> DataCheck:
        if self.error is not None:
            raise self.error
        known = self._counted()
        if not self.todo:
            return DataCheck(cached=tuple(self.cached), n_docs=known)
        if self.proc is None:  # no engine environment here
            if self.required:
                raise MissingEnvError("the lm-eval environment", self.settings.vllm.location)
            return DataCheck(skipped=f"no engine environment at {self.settings.vllm.location}; each node reads "
                                     "its own", n_docs=known)
        rc = self.proc.wait()
        out = self.work / "out.json"
        if rc != 0 or not out.is_file():
            raise EngineError(f"the lm-eval data check exited with code {rc} in {self.settings.vllm.location}",
                              log_tail=self.proc.log_tail())
        results = json.loads(out.read_text())  # per group, in todo's order
        problems = []
        for (_, tasks), found in zip(self.todo, results):
            for t in tasks:
                res = found.get(t.name, {"problem": "broken", "error": "the check returned nothing for it"})
                if res.get("ok"):
                    _remember(self.markers[t.key], t, res)
                    if isinstance(res.get("n_docs"), int):
                        known[t.key] = res["n_docs"]
                else:
                    problems.append(_problem(t.name, res, self.files.get(t.key)))
        if problems:
            raise ConfigError("; ".join(problems), file=self.config_file, where="suites: lm_eval.tasks")
        return DataCheck(checked=tuple(t.name for _, ts in self.todo for t in ts), cached=tuple(self.cached),
                         seconds=time.monotonic() - self.start, n_docs=known)

    def _counted(self) -> dict[str, int]:
        """The doc counts of the tasks that passed before, from their markers."""
        out = {}
        for key, path in self.markers.items():
            try:
                n = json.loads(path.read_text()).get("n_docs")
            except (OSError, ValueError):
                continue
            if isinstance(n, int):
                out[key] = n
        return out

    def close(self) -> None:
        if self.proc is not None and self.proc.alive():
            self.proc.terminate(grace_s=INTERRUPT_GRACE_S)
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)


def start_check(groups: Sequence[tuple[LmEvalSuiteRef, Sequence[LmEvalTask]]], settings: Settings,
                config_file: str = "", required: bool = True) -> DataRun:
    """Start checking the given tasks (per suite, its entry and its unbatched tasks); `.result()` waits for it (a
    DataCheck, or the ConfigError naming every task that does not load), `.close()` stops the worker, whatever
    happened. `required`: the engine environment must be here (the local executor); else its absence skips the
    check (a Ray cluster's nodes read their own)."""
    return DataRun(groups, settings, config_file, required)
