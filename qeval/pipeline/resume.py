"""What an earlier run left: the variants a rerun keeps, and what a cut variant finished.

A rerun resumes from the store (per-item records are there as they arrived); the earlier run record
says which variants were done, under which key, and what was measured while serving them.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from ..config import VariantSpec
from ..record.run import Measured, VariantResult
from ..record.store import ResultsStore
from .judge import load_probe, summarize
from .plan import Plan, VariantPlan

STILL_TO_RESUME = "run the same command again to resume"


def earlier_variants(record_path: Path) -> dict[str, dict]:
    """Per variant name, what an earlier record says of it: its spec, its result, the campaign's dtype then
    (records before the dtype was recorded were made in the model's dtype, bfloat16 by default)."""
    try:
        data = json.loads(record_path.read_text())
        specs = {v["name"]: v for v in data["config"]["variants"]}
        dtype = data["config"]["model"].get("dtype", "bfloat16")
        return {r["name"]: {"spec": specs[r["name"]], "result": r, "dtype": dtype}
                for r in data["variants"] if r["name"] in specs}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def carry_over(plan: VariantPlan, earlier: dict | None, store: ResultsStore, run_dir: Path) -> VariantResult | None:
    """A variant left out by `only` keeps an earlier record's result where that record shows the same
    spec served in today's dtype, and the store holds every suite of this campaign (and its probe) whole
    under the key it had: nothing is quantized to find out, and what is shown is summarized anew."""
    v = plan.variant
    if earlier is None or earlier["result"].get("status") != "ok":
        return None
    try:  # read with today's defaults: a field added to VariantSpec since is not a difference
        same = VariantSpec.model_validate(earlier["spec"]).model_dump(mode="json") == v.model_dump(mode="json")
    except ValidationError:
        return None
    if not same:
        return None
    res = VariantResult.model_validate(earlier["result"])
    # an endpoint someone else runs has no dtype of ours; records before dtypes were kept: the model's
    if plan.dtype is not None and (res.dtype or earlier["dtype"]) != plan.dtype.dtype or not res.key:
        return None
    if any(not store.is_complete(res.key, k.key) for k in plan.suites.parts()):
        return None
    if plan.probe is not None and not load_probe(res, run_dir / plan.probe_path(res.key)):
        return None
    res.suites = summarize(store, res.key, plan.suites)
    return res


def describe_partial(store: ResultsStore, res: VariantResult, plan: VariantPlan, run_dir: Path) -> None:
    """A variant cut while being evaluated: what it finished, for the comparison, and what it lacks."""
    p: Plan = plan.suites
    res.suites = summarize(store, res.key, p, complete_only=True)
    if plan.probe is not None:
        load_probe(res, run_dir / plan.probe_path(res.key))
    done = {s.suite for s in res.suites}
    missing = [k.suite for k in p.parts() if k.suite not in done]
    missing += ["latency probe"] if plan.probe is not None and res.probe is None else []
    res.error = (f"cut while being evaluated: {len(done)} finished suite(s) compared, verdict NOT_EVALUATED; "
                 f"missing: {', '.join(missing) or 'nothing'}; {STILL_TO_RESUME}")


def not_reached(plan: VariantPlan, why: str) -> VariantResult:
    return VariantResult(name=plan.name, method=plan.variant.method, role=plan.role, status="skipped", error=why)


def with_earlier(measured: Measured, earlier: Measured | None, served: bool) -> Measured:
    """What a variant's run measured, with what an earlier record measured under the same key (its facts of
    serving, record.prior_facts) where this run did not: the time its checkpoint took to make, where an
    earlier attempt made it, and, where nothing was served now (`served` False: the store held every suite),
    every fact of serving it."""
    if earlier is None:
        return measured
    update = {"quantize_seconds": earlier.quantize_seconds} if measured.quantize_seconds is None else {}
    if not served:
        update |= {f: getattr(earlier, f) for f in earlier.model_fields_set}
    return measured.model_copy(update=update)
