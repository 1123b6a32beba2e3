"""MLflow GenAI evaluation runs (`mlflow.genai.evaluate`): one run's traces, each an item, each scorer's feedback on
it a metric, read through MLflow's client from the run's tracking store (`runs:/<run id>`).

The rows and their scores are those `mlflow.genai.compare_evaluations` reads: the run's traces, and on each the
`Feedback` assessments that are valid, carry no error and belong to this run (or to none). An item is the hash of its
root span's inputs (MLflow's own fallback pairing key, canonical JSON): the request id MLflow tags a trace with is
drawn afresh for every row of every evaluation that calls a `predict_fn`, so it names a row of one run, not an item
across two. Its document adds the row's expectations. Two rows of one run with the same inputs, or two feedbacks of one
name on one trace, are refused naming the traces (compare_evaluations leaves the first unpaired and averages the
second). MLflow declares neither a scorer's type nor its direction: every gated metric is declared in `metrics:`.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, ClassVar

from ..hashing import key_hash
from ..record.store import Record
from . import IMPORTERS
from .base import BadResults, Imported, ImportedTask, Importer, Source, SourceFile

FORMAT = "mlflow"
PREFIX = "runs:/"
# a yes/no rating (MLflow's judges' CategoricalRating) is pass/fail; any other string is not a score qeval can read
RATINGS = {"yes": 1.0, "no": 0.0}


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def inputs_hash(inputs: Any) -> str:
    """MLflow's pairing key of a row: sha256 of its root span's inputs as canonical JSON (compare_evaluations)."""
    return hashlib.sha256(_canonical(inputs).encode()).hexdigest()


def _value(name: str, value: Any, src: str, where: str) -> float:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and value.strip().lower() in RATINGS:
        return RATINGS[value.strip().lower()]
    raise BadResults(f"scorer {name!r}: value {str(value)[:80]!r} is not a score qeval reads (a bool, yes/no, or a "
                     "finite number)", file=src, where=where)


def run_id_of(src: Path | str) -> str:
    text = str(src)
    if not text.startswith(PREFIX) or not text[len(PREFIX):].strip("/"):
        raise BadResults(f"not an MLflow run: expected {PREFIX}<run id>", file=text)
    return text[len(PREFIX):].strip("/")


def _traces(client: Any, experiment_id: str, run_id: str) -> list[Any]:
    out, token = [], None
    while True:
        page = client.search_traces(locations=[experiment_id], run_id=run_id, max_results=500, page_token=token)
        out += list(page)
        token = page.token
        if not token:
            return out


def _feedbacks(trace: Any, run_id: str, src: str, where: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The trace's scores (compare_evaluations' filter), and its scorers that gave none, each with why."""
    from mlflow.entities.assessment import Feedback

    scores: dict[str, Any] = {}
    failed: dict[str, str] = {}
    for a in trace.info.assessments:
        if not isinstance(a, Feedback) or a.run_id not in (None, run_id):
            continue
        if a.error is not None or a.valid is False:
            why = getattr(a.error, "error_message", None) or getattr(a.error, "error_code", None) or "marked invalid"
            failed[a.name] = f"scorer {a.name!r} gave no value ({str(why)[:200]})"
            continue
        if a.name in scores:
            raise BadResults(f"scorer {a.name!r} gave two feedbacks on one trace: qeval reads one value an item "
                             "(MLflow would average them)", file=src, where=where)
        scores[a.name] = a.value
    return scores, failed


def _expectations(trace: Any) -> dict[str, Any]:
    from mlflow.entities.assessment import Expectation

    return {a.name: a.value for a in trace.info.assessments if isinstance(a, Expectation)}


def read_run(client: Any, run_id: str, tracking_uri: str | None) -> Imported:
    """One evaluation run -> one task (`mlflow/<dataset name>`), its records and its identity."""
    from mlflow.exceptions import MlflowException

    src = f"{PREFIX}{run_id}"
    try:
        run = client.get_run(run_id)
    except MlflowException as e:
        raise BadResults(f"no such MLflow run in the tracking store {tracking_uri or '(the default)'}: "
                         f"{str(e).splitlines()[0][:200]}", file=src) from None
    traces = _traces(client, run.info.experiment_id, run_id)
    if not traces:
        raise BadResults("the run has no traces: not an mlflow.genai.evaluate run (or its traces were deleted)",
                         file=src)
    records: list[Record] = []
    dropped: dict[str, str] = {}
    seen: dict[str, str] = {}
    names: list[str] = []
    for trace in sorted(traces, key=lambda t: (t.info.request_time, t.info.trace_id)):
        tid = trace.info.trace_id
        where = f"trace {tid}"
        root = trace.data._get_root_span()
        if root is None or root.inputs is None:
            raise BadResults("a trace with no root span inputs: nothing identifies its item", file=src, where=where)
        item = inputs_hash(root.inputs)
        if item in seen:
            raise BadResults(f"two rows with the same inputs (traces {seen[item]} and {tid}): an item must be one row",
                             file=src, where=where)
        seen[item] = tid
        raw, failed = _feedbacks(trace, run_id, src, where)
        names += [n for n in [*raw, *failed] if n not in names]
        if failed:
            dropped[item] = "; ".join(failed.values())
            continue
        if not raw:
            dropped[item] = "no score"
            continue
        scores = {n: _value(n, v, src, where) for n, v in raw.items()}
        expected = _expectations(trace)
        records.append(Record(item_id=item, scores=scores, prompt_hash=item,
                              doc_hash=key_hash({"inputs": _canonical(root.inputs), "expectations": _canonical(expected)}),
                              response=None if root.outputs is None else _canonical(root.outputs)[:2000],
                              extra={"at": where, "trace_id": tid,
                                     "request_id": trace.info.tags.get(_request_id_tag()),
                                     "inputs": _canonical(root.inputs)[:500]}))
    datasets = [d.dataset for d in run.inputs.dataset_inputs] if run.inputs is not None else []
    dataset = datasets[0] if len(datasets) == 1 else None
    tags = run.data.tags
    identity = {"scorers": sorted(names), "dataset_digest": dataset.digest if dataset else None,
                "scorers_digest": tags.get("mlflow.genaiEvaluate.scorersDigest")}
    suite = f"{FORMAT}/{dataset.name if dataset else 'eval'}"
    advisory = {"agent": tags.get("mlflow.genaiEvaluate.agent.function"),
                "agent_digest": tags.get("mlflow.genaiEvaluate.agent.digest"), "traces": len(traces)}
    # a run does not record its scorers' order (they run concurrently, so their feedbacks come in any order): by name,
    # the first is the task's primary metric; a rule that names another gates it too
    task = ImportedTask(suite=suite, records=tuple(records), declared={}, identity=identity, advisory=advisory,
                        planned=tuple(sorted(names)), file=src, records_file="", dropped=dropped)
    content = key_hash([[r.item_id, r.doc_hash, sorted(r.scores.items())] for r in records] + [sorted(dropped.items())])
    source = Source(format=FORMAT, evaluator="mlflow", version=None,  # a run does not record the MLflow that wrote it
                    model=run.info.run_name, files=(SourceFile(path=src, sha256=content, lines=len(traces)),))
    return Imported(tasks={suite: task}, source=source)


def _request_id_tag() -> str:
    from mlflow.tracing.constant import TraceTagKey

    return TraceTagKey.EVAL_REQUEST_ID  # its literal has changed between MLflow versions: read, never spelled


@IMPORTERS.register(FORMAT)
class MlflowImporter(Importer):
    """An `mlflow.genai.evaluate` run, `runs:/<run id>`, in the tracking store `tracking_uri` (None: MLflow's
    default, MLFLOW_TRACKING_URI)."""

    kind = FORMAT
    local: ClassVar[bool] = False  # a run in a tracking store, not a file

    def __init__(self, tracking_uri: str | None = None):
        self.tracking_uri = tracking_uri

    @classmethod
    def claims(cls, src: Path) -> bool:
        return str(src).startswith(PREFIX)

    def read(self, src: Path) -> Imported:
        from mlflow.tracking import MlflowClient

        return read_run(MlflowClient(tracking_uri=self.tracking_uri), run_id_of(src), self.tracking_uri)
