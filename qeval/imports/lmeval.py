"""lm-eval's `--log_samples` output: `results_<date>.json` and one `samples_<task>_<date>.jsonl` per task.

The samples parser here is the one qeval reads lm-eval with, whether qeval ran lm-eval itself (suites/lmeval.py)
or a team brings a run it already has. lm-eval writes one line per (doc, filter): the lines of one `doc_id` become
one record, a task with several filters naming each metric `metric,filter` (`metric` alone for the filter `none`),
so no filter's scores are dropped and no doc is counted twice. Only scores lm-eval averages over the items are
per-item scores; a corpus metric (bleu, f1, perplexity: its per-line value is a log-likelihood or a tuple that a
corpus aggregation turns into the figure) is refused by name.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..hashing import file_hash
from ..record.metrics import MetricSpec
from ..record.store import Record
from . import IMPORTERS
from .base import BadResults, Imported, ImportedTask, Importer, Source, SourceFile

# lm-eval's own per-item metrics (lm_eval/api/metrics.py, aggregation `mean`): whether each is a 0/1 indicator,
# and lm-eval's `higher_is_better`; a task's metric_list may restate the direction
LMEVAL_METRICS: dict[str, tuple[bool, bool]] = {
    "acc": (True, True), "acc_norm": (True, True), "acc_mutual_info": (True, True), "acc_bytes": (True, True),
    "exact_match": (True, True), "likelihood": (False, True)}

# lm-eval's metrics whose per-line value is not the item's score, with the aggregation that makes the figure
CORPUS_METRICS: dict[str, str] = {
    "perplexity": "perplexity", "word_perplexity": "weighted_perplexity", "byte_perplexity": "weighted_perplexity",
    "bits_per_byte": "bits_per_byte", "brier_score": "brier_score", "bleu": "bleu", "chrf": "chrf",
    "chrf++": "chrf++", "ter": "ter", "f1": "f1", "mcc": "matthews_corrcoef"}

PER_ITEM_AGGREGATION = "mean"
NO_FILTER = "none"
FORMAT = "lm_eval"


def not_per_item(task: str, metric: str, aggregation: str) -> str:
    return (f"task {task}: metric {metric!r} is not a per-item score: lm-eval aggregates it over the corpus "
            f"({aggregation}), and qeval pairs and gates per-item scores that lm-eval averages (aggregation "
            f"{PER_ITEM_AGGREGATION})")


def _score(v: object) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


@dataclass(frozen=True)
class _Line:
    at: int
    doc_id: int | str
    filter: str
    scores: dict[str, float]
    doc_hash: str
    prompt_hash: str
    target: str
    resps: Any


def _lines(path: Path, task: str, aggregations: Mapping[str, str]) -> list[_Line]:
    text = path.read_text(errors="replace")
    rows = text.split("\n")
    out = []
    for lineno, line in enumerate(rows, 1):
        if not line.strip():
            continue
        try:
            s = json.loads(line)
        except ValueError as e:
            cut = lineno == len(rows) and not text.endswith("\n")
            raise BadResults(f"not JSON ({e})" + (" (the file ends mid-line: truncated?)" if cut else ""),
                             file=path, where=str(lineno)) from None
        if not isinstance(s, dict):
            raise BadResults("not an lm-eval sample (a JSON object per line)", file=path, where=str(lineno))
        for key in ("doc_id", "metrics", "doc_hash", "prompt_hash"):
            if key not in s:
                raise BadResults(f"not an lm-eval sample: no {key!r}", file=path, where=str(lineno))
        if not isinstance(s["metrics"], list):
            raise BadResults("'metrics' is not a list of metric names", file=path, where=str(lineno))
        scores = {}
        for m in s["metrics"]:
            agg = aggregations.get(m) or CORPUS_METRICS.get(m)
            if agg is not None and agg != PER_ITEM_AGGREGATION:
                raise BadResults(not_per_item(task, m, agg), file=path, where=str(lineno))
            v = _score(s.get(m))
            if v is None:
                raise BadResults(f"metric {m!r} is {s.get(m)!r}, not a finite number", file=path, where=str(lineno))
            scores[m] = v
        out.append(_Line(at=lineno, doc_id=s["doc_id"], filter=str(s.get("filter", NO_FILTER)), scores=scores,
                         doc_hash=str(s["doc_hash"]), prompt_hash=str(s["prompt_hash"]),
                         target=str(s.get("target"))[:500], resps=s.get("filtered_resps")))
    return out


def read_samples(path: Path, task: str | None = None, aggregations: Mapping[str, str] | None = None) -> list[Record]:
    """One samples_*.jsonl -> one record per doc_id, in the file's order. `aggregations`: each metric's aggregation
    where the task declares one (its metric_list), else lm-eval's own. Each record's `extra["at"]` is the file and
    line its first line is on. Raises BadResults (file and line) for a line that is not JSON, a field missing, a
    score not a finite number, a corpus metric, or one (doc_id, filter) twice."""
    task = task or path.stem
    lines = _lines(path, task, aggregations or {})
    filters = {ln.filter for ln in lines}
    several = len(filters) > 1
    by_doc: dict[str, list[_Line]] = {}
    for ln in lines:
        by_doc.setdefault(str(ln.doc_id), []).append(ln)
    records = []
    for doc, group in by_doc.items():
        seen: dict[str, _Line] = {}
        scores: dict[str, float] = {}
        for ln in group:
            if ln.filter in seen:
                raise BadResults(f"doc_id {doc} twice" + (f" for filter {ln.filter!r}" if several else "")
                                 + f" (lines {seen[ln.filter].at} and {ln.at})", file=path, where=str(ln.at))
            first = group[0]
            for key in ("doc_hash", "prompt_hash"):
                if getattr(ln, key) != getattr(first, key):
                    raise BadResults(f"doc_id {doc}: lines {first.at} and {ln.at} have different {key}es",
                                     file=path, where=str(ln.at))
            seen[ln.filter] = ln
            named = ln.filter == NO_FILTER or not several
            scores.update({(m if named else f"{m},{ln.filter}"): v for m, v in ln.scores.items()})
        first = group[0]
        resp = first.resps if not several else {ln.filter: ln.resps for ln in group}
        records.append(Record(item_id=doc, scores=scores, prompt_hash=first.prompt_hash, doc_hash=first.doc_hash,
                              response=json.dumps(resp)[:2000],
                              extra={"target": first.target, "at": f"{path.name}:{first.at}"}))
    return records


def declared_metric(name: str) -> MetricSpec | None:
    """lm-eval's own declaration of a metric (None where lm-eval declares none)."""
    known = LMEVAL_METRICS.get(name.partition(",")[0])
    if known is None:
        return None
    return MetricSpec(binary=known[0], higher_is_better=known[1], source=f"lm-eval's {name.partition(',')[0]}")


# ---- a run lm-eval wrote ---------------------------------------------------------------------------------------

_RESULTS = re.compile(r"^results_(?P<date>.+)\.json$")

# a task config's fields that shape its prompts or its scoring: two runs differing in one are not compared
PROMPT_FIELDS = ("doc_to_text", "doc_to_target", "doc_to_choice", "description", "target_delimiter",
                 "fewshot_delimiter", "fewshot_config", "num_fewshot", "output_type", "generation_kwargs",
                 "filter_list", "metric_list", "test_split", "validation_split", "training_split", "fewshot_split",
                 "repeats", "process_docs", "process_results", "gen_prefix", "use_prompt")
RUN_FIELDS = ("fewshot_seed", "gen_kwargs")
TOP_FIELDS = ("chat_template_sha", "system_instruction_sha", "fewshot_as_multiturn")


def results_files(src: Path) -> list[Path]:
    if src.is_file():
        return [src] if _RESULTS.match(src.name) else []
    if src.is_dir():
        return sorted(p for p in src.rglob("results_*.json") if _RESULTS.match(p.name))
    return []


def _looks_like(src: Path) -> str:
    """What another format a source looks like, for the error that refuses it."""
    if src.suffix == ".eval":
        return f" it looks like an inspect log (use inspect:{src})"
    if src.is_file() and src.suffix == ".json":
        try:
            doc = json.loads(src.read_text(errors="replace"))
        except ValueError:
            return ""
        if isinstance(doc, dict) and "eval" in doc and ("samples" in doc or "results" in doc):
            return f" it looks like an inspect log (use inspect:{src})"
    return ""


def _lines_of(path: Path) -> int:
    with path.open("rb") as f:
        return sum(1 for _ in f)


@IMPORTERS.register(FORMAT)
class LmEvalImporter(Importer):
    """A folder lm-eval wrote with `--output_path ... --log_samples`, or one of its results_*.json named."""

    kind = FORMAT

    @classmethod
    def claims(cls, src: Path) -> bool:
        return bool(results_files(src))

    def read(self, src: Path) -> Imported:
        found = results_files(src)
        if not found:
            raise BadResults("not lm-eval output (no results_*.json)" + (";" + hint if (hint := _looks_like(src))
                                                                       else ""), file=src)
        if len(found) > 1:
            raise BadResults(f"{len(found)} lm-eval runs (results files): name one of "
                             + ", ".join(str(p) for p in found), file=src)
        results_path = found[0]
        try:
            results = json.loads(results_path.read_text())
        except ValueError as e:
            raise BadResults(f"not JSON ({e})", file=results_path) from None
        if not isinstance(results, dict) or not isinstance(results.get("configs"), dict):
            raise BadResults("not an lm-eval results file (no 'configs')", file=results_path)
        date = _RESULTS.match(results_path.name)["date"]
        files = [results_path]
        tasks = {}
        for task, config in results["configs"].items():
            samples = results_path.parent / f"samples_{task}_{date}.jsonl"
            if not samples.is_file():
                raise BadResults(f"task {task}: no samples file {samples.name} beside it (was lm-eval run with "
                                 "--log_samples?)", file=results_path, where=f"configs.{task}")
            files.append(samples)
            metric_list = [e for e in config.get("metric_list") or [] if isinstance(e, dict)]
            aggregations = {e["metric"]: str(e["aggregation"]) for e in metric_list
                            if isinstance(e.get("metric"), str) and isinstance(e.get("aggregation"), str)}
            records = read_samples(samples, task, aggregations)
            suite = f"lm_eval/{task}"
            tasks[suite] = ImportedTask(
                suite=suite, records=tuple(records), declared=self._declared(task, results, records, results_path),
                identity=self._identity(task, config, results), advisory=self._advisory(task, config, results),
                planned=tuple(e["metric"] for e in metric_list if isinstance(e.get("metric"), str)),
                file=str(results_path), records_file=str(samples))
        args = (results.get("config") or {}).get("model_args")
        model = results.get("model_name") or (args.get("model") if isinstance(args, dict) else None)
        source = Source(format=FORMAT, evaluator="lm-eval", version=results.get("lm_eval_version"),
                        model=None if model is None else str(model),
                        files=tuple(SourceFile(str(p), file_hash(p), _lines_of(p)) for p in files))
        return Imported(tasks=tasks, source=source)

    @staticmethod
    def _declared(task: str, results: dict, records: list[Record], file: Path) -> dict[str, MetricSpec]:
        """Each scored metric's direction as lm-eval's results declare it (`higher_is_better`), its 0/1 type as
        lm-eval's metric table says; a direction the two give differently is refused."""
        hib = (results.get("higher_is_better") or {}).get(task) or {}
        out = {}
        for name in sorted({m for r in records for m in r.scores}):
            base = name.partition(",")[0]
            own = declared_metric(name)
            said = hib.get(base)
            if isinstance(said, bool):
                if own is not None and own.higher_is_better != said:
                    raise BadResults(f"task {task}: metric {base!r} is declared higher_is_better: {said}, and lm-eval "
                                     f"declares it {own.higher_is_better}", file=file,
                                     where=f"higher_is_better.{task}.{base}")
                out[name] = MetricSpec(binary=own.binary if own else False, higher_is_better=said,
                                       source=f"{file.name}: higher_is_better.{task}.{base}"
                                       + ("" if own else ", continuous: not an lm-eval 0/1 metric"))
            elif own is not None:
                out[name] = own
        return out

    @staticmethod
    def _identity(task: str, config: dict, results: dict) -> dict[str, Any]:
        run = results.get("config") or {}
        out: dict[str, Any] = {f"configs.{task}.{k}": config.get(k) for k in PROMPT_FIELDS if k in config}
        out[f"configs.{task}.metadata.version"] = (config.get("metadata") or {}).get("version")
        out[f"versions.{task}"] = (results.get("versions") or {}).get(task)
        out[f"n-shot.{task}"] = (results.get("n-shot") or {}).get(task)
        out.update({f"config.{k}": run.get(k) for k in RUN_FIELDS})
        out.update({k: results.get(k) for k in TOP_FIELDS})
        return out

    @staticmethod
    def _advisory(task: str, config: dict, results: dict) -> dict[str, Any]:
        run = results.get("config") or {}
        return {"lm_eval_version": results.get("lm_eval_version"), "config.limit": run.get("limit"),
                "model_name": results.get("model_name"),
                f"configs.{task}.dataset_path": config.get("dataset_path"),
                f"configs.{task}.dataset_kwargs": config.get("dataset_kwargs"),
                f"n-samples.{task}": (results.get("n-samples") or {}).get(task)}
