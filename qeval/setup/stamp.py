"""A built folder is current when its `.stamp` holds the hash of the spec that made it (content, not file
dates: a fresh clone or a checkout must not trigger a rebuild). A folder without a stamp is half-built and is
rebuilt from scratch."""

from __future__ import annotations

import re
from pathlib import Path

STAMP = ".stamp"
PREFIX = "qeval-setup "  # stamps this package writes; a bare hash is one written by the earlier shell scripts
_BARE = re.compile(r"[0-9a-f]{64}")


def stamp_of(folder: Path) -> str | None:
    path = folder / STAMP
    return path.read_text().strip() if path.is_file() else None


def is_current(folder: Path, spec: str) -> bool:
    return stamp_of(folder) == PREFIX + spec


def is_legacy(folder: Path) -> bool:
    """Finished by the earlier build scripts (their stamp: a bare sha256 of the scripts' text). Such a folder is
    adopted when it holds what the spec pins, so that upgrading qeval does not rebuild gigabytes."""
    stamp = stamp_of(folder)
    return stamp is not None and bool(_BARE.fullmatch(stamp))


def write(folder: Path, spec: str) -> None:
    (folder / STAMP).write_text(PREFIX + spec + "\n")


def versions_in(roots: list[Path]) -> dict[str, str]:
    """Distribution -> version installed under these site-packages folders, read from dist-info names
    (starting the env's Python to ask would cost seconds). Names normalised as PEP 503 does."""
    found: dict[str, str] = {}
    for root in roots:
        for info in root.glob("*.dist-info"):
            name, _, ver = info.name[: -len(".dist-info")].partition("-")
            found.setdefault(normalize(name), ver)
    return found


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def holds(found: dict[str, str], pins: dict[str, str]) -> bool:
    """Every pin installed at its version; a local label (torch's +cpu, +cu130) does not count."""
    return all(found.get(normalize(d), "").split("+")[0] == v for d, v in pins.items())
