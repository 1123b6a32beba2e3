"""Content hashes that key the cache and the results store."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any


# The version of every content key qeval stores results, checkpoints and probes under (the variant key, the
# suite key, the quantized checkpoint's, the probe's, the campaign's config hash; the shared records store is
# keyed by the variant and suite keys). Bump it when a change alters results under an unchanged key: a new
# default, a fix in how a suite is scored or a checkpoint made, a setting that now changes outputs. Every key
# then changes, and nothing stored before is found again (results are recomputed, never mixed). 1: the keys
# qeval took before the version was folded in.
KEY_VERSION = 2


def stable_hash(obj: Any, n: int = 16) -> str:
    """A digest of JSON-able content (a file list, chunks of text, a seed's inputs): not a store key (key_hash)."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def key_hash(obj: Any, n: int = 16) -> str:
    """A content key that results, checkpoints or probes are stored and found under: `obj` with KEY_VERSION.
    Every key qeval stores under is made here, so that bumping the version changes all of them."""
    return stable_hash({"key_version": KEY_VERSION, "content": obj}, n)


def file_hash(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def content_hash(path: Path) -> str:
    """A file's or a folder's content (relative names and bytes), nothing written beside it: for inputs that
    are the user's (a calibration set), whose folder qeval must not touch. Read once per content: a set is
    hashed for its variant's key, its record and the campaign's hash, and may be gigabytes."""
    path = path.resolve()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    stats = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    return _content_hash(path, path.is_file(), stats)


@functools.lru_cache(maxsize=64)  # a memo of a pure function of the bytes, keyed by where they are and their stats
def _content_hash(path: Path, is_file: bool, stats: tuple) -> str:
    if is_file:
        return file_hash(path)[:32]
    return stable_hash([(str(Path(p).relative_to(path)), file_hash(Path(p))) for p, _, _ in stats], n=32)


# files a quantizer writes beside the checkpoint that differ between identical runs (timings, absolute paths of
# its temporary folder, the recipe as text) and change no output: left out of the checkpoint's identity
VOLATILE = frozenset({"qeval-quantize.json", "recipe.yaml"})


def identity_files(folder: Path) -> list[Path]:
    """What decides a checkpoint's outputs: weights, config (with its quantization config), tokenizer and
    any other file, but not hidden files or folders (a hub client's download records in `.cache/` carry the time
    of the download), logs or the VOLATILE records of how it was made."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(folder).parts)
                  and p.name not in VOLATILE and p.suffix != ".log")


def in_hub_cache(folder: Path) -> bool:
    """Whether `folder` is a snapshot in a Hugging Face hub cache (<repo>/snapshots/<commit>, its files links
    into <repo>/blobs): the hub client's folder, where qeval writes nothing."""
    return folder.parent.name == "snapshots" and (folder.parent.parent / "blobs").is_dir()


def _hub_sha256(path: Path) -> str | None:
    """A hub snapshot file's sha256 without reading it: the hub names a large (LFS) file's blob by its sha256."""
    if not path.is_symlink():
        return None
    blob = path.resolve()
    return blob.name if blob.parent.name == "blobs" and _SHA256.fullmatch(blob.name) else None


_SHA256 = re.compile(r"[0-9a-f]{64}")


def tree_hash(folder: Path) -> str:
    """A checkpoint's content identity (identity_files); memoized in a sidecar keyed by size and mtime. A
    checkpoint re-made with identical tensors hashes the same, so its stored results are reused. A Hugging Face
    hub snapshot gets no sidecar: its large files' hashes are their blobs' names, the rest is small."""
    files = identity_files(folder)
    if in_hub_cache(folder):
        return stable_hash([(str(p.relative_to(folder)), _hub_sha256(p) or file_hash(p)) for p in files], n=32)
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
