"""Content hashes that key the cache and the results store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any


def stable_hash(obj: Any, n: int = 16) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tree_hash(folder: Path) -> str:
    """Hash every file of a checkpoint folder; memoized in a sidecar keyed by size and mtime."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    stat_key = stable_hash([(str(p.relative_to(folder)), p.stat().st_size, p.stat().st_mtime_ns) for p in files])
    memo = folder / ".qeval-hash.json"
    try:
        cached = json.loads(memo.read_text())
        if cached.get("stat_key") == stat_key:
            return cached["hash"]
    except (OSError, ValueError):
        pass
    digest = stable_hash([(str(p.relative_to(folder)), file_hash(p)) for p in files], n=32)
    try:
        memo.write_text(json.dumps({"stat_key": stat_key, "hash": digest}))
    except OSError:
        pass  # a read-only checkpoint is hashed every time
    return digest
