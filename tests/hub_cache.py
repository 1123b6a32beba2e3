"""A Hugging Face hub cache laid out as huggingface_hub writes it, built from a local folder (no hub here):
<cache>/models--<org>--<name>/blobs/<id> (a large file's id is its sha256, as LFS names it; a small one's its
git blob sha1), refs/<branch or tag> holding the commit, snapshots/<commit>/<file> relative links to the blobs."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

LFS_FROM = 1 << 20  # files the hub keeps in LFS (weights, big tokenizers): their blobs are named by sha256


def _blob_id(path: Path) -> str:
    data = path.read_bytes()
    if len(data) >= LFS_FROM:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_snapshot(cache: Path, repo_id: str, source: Path, commit: str, refs: tuple[str, ...] = ("main",),
                 skip: tuple[str, ...] = (".stamp", ".qeval-hash.json")) -> Path:
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    blobs, snap = repo / "blobs", repo / "snapshots" / commit
    blobs.mkdir(parents=True, exist_ok=True)
    for f in sorted(p for p in source.rglob("*") if p.is_file() and p.name not in skip):
        rel = f.relative_to(source)
        blob = blobs / _blob_id(f)
        if not blob.exists():
            try:
                os.link(f, blob)  # the same bytes, without copying a model's weights
            except OSError:
                shutil.copyfile(f, blob)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (repo / "refs" / ref).write_text(commit)  # no newline, as the hub client writes it
    return snap
