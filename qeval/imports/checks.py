"""Before any statistics: two imported runs of a task are the same task (their identities equal), and their items
pair (the same item asked the same way). The first failure is bad input (exit 2), naming both files."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..record.metrics import MetricSpec
from ..record.store import Record
from .base import BadResults, ImportedTask

SHOWN = 20  # unpaired item ids named per side in the record


def _short(v: Any) -> str:
    text = json.dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def differences(base: dict[str, Any], cand: dict[str, Any]) -> dict[str, list[Any]]:
    return {k: [base.get(k), cand.get(k)] for k in sorted(set(base) | set(cand)) if base.get(k) != cand.get(k)}


def check_comparable(base: ImportedTask, cand: ImportedTask, variant: str) -> dict[str, list[Any]]:
    """Refuses two runs of a task whose identities differ, naming the setting, both values and both files; returns
    the advisory differences (shown, not refused)."""
    for key, (b, c) in differences(base.identity, cand.identity).items():
        raise BadResults(f"{base.suite}: {key} differs: {_short(b)} in the baseline ({base.file}) vs {_short(c)} in "
                         f"variant {variant}: not the same task, so not compared", file=cand.file, where=key)
    return differences(base.advisory, cand.advisory)


def check_declared(base: ImportedTask, cand: ImportedTask, variant: str) -> dict[str, MetricSpec]:
    """The metrics' declarations, which both runs must give alike."""
    for m in sorted(base.declared.keys() & cand.declared.keys()):
        b, c = base.declared[m], cand.declared[m]
        if (b.binary, b.higher_is_better) != (c.binary, c.higher_is_better):
            raise BadResults(f"{base.suite}: metric {m!r} is declared differently: {b.source} in the baseline, "
                             f"{c.source} in variant {variant}", file=cand.file)
    return {**cand.declared, **base.declared}


@dataclass(frozen=True)
class ItemPairing:
    shared: int
    unpaired_base: tuple[str, ...]
    unpaired_cand: tuple[str, ...]


def _at(task: ImportedTask, r: Record) -> str:
    at = str(r.extra.get("at", ""))
    return str(Path(task.records_file).parent / at) if at and task.records_file else at or repr(r.item_id)


def check_items(base: ImportedTask, cand: ImportedTask, variant: str) -> ItemPairing:
    """An inner join on the item id: an item asked differently (its prompt or document hash) is refused naming
    both lines; no shared item at all is refused naming both files."""
    b = {r.item_id: r for r in base.records if r.sample == 0}
    c = {r.item_id: r for r in cand.records if r.sample == 0}
    shared = [i for i in b if i in c]
    if not shared:
        raise BadResults(f"{base.suite}: no shared items between the baseline ({base.records_file}, "
                         f"{len(b)} items) and variant {variant} ({len(c)} items): nothing to pair",
                         file=cand.records_file or cand.file)
    for i in shared:
        for field in ("doc_hash", "prompt_hash"):
            hb, hc = getattr(b[i], field), getattr(c[i], field)
            if hb and hc and hb != hc:
                raise BadResults(f"{base.suite}: item {i}: {field} differs from the baseline's ({_at(base, b[i])}): "
                                 "the item was not asked the same way", file=_at(cand, c[i]))
    return ItemPairing(shared=len(shared), unpaired_base=tuple(i for i in b if i not in c),
                       unpaired_cand=tuple(i for i in c if i not in b))
