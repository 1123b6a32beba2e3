"""BIG-bench task.json -> JSONL rows {id, input, choices, gold, target} that lm-eval's json loader reads."""

import json
import sys
from pathlib import Path


def convert(src: Path, dst: Path) -> int:
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


if __name__ == "__main__":
    root = Path(sys.argv[1])
    for src in sorted(root.rglob("task.json")):
        print(src.parent.relative_to(root), convert(src, src.with_name("task.jsonl")))
