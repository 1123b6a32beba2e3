"""`$QEVAL_CACHE/envs/tools.json`: which env runs each tool on this machine, written by `qeval setup` and read
by qeval's settings. Standard library only, and below both: qeval's settings read it at every start."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "tools.json"


@dataclass(frozen=True)
class ToolEntry:
    name: str  # the env's name, recorded with every result
    python: str
    pythonpath: str | None = None


def path(cache: Path) -> Path:
    return cache / "envs" / FILE


def read(cache: Path) -> tuple[str | None, dict[str, ToolEntry]]:
    """(device, tool -> entry); (None, {}) where no setup wrote one. A file that does not parse counts as
    absent: qeval then looks for the CPU envs by name, as without one."""
    try:
        data = json.loads(path(cache).read_text())
        return data.get("device"), {t: ToolEntry(**e) for t, e in data.get("tools", {}).items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return None, {}


def write(cache: Path, device: str, tools: dict[str, ToolEntry]) -> Path:
    """Merged with what is there for the same device (`--only` builds one tool); another device's replaced."""
    old_device, old = read(cache)
    merged = (old if old_device == device else {}) | tools
    target = path(cache)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"device": device, "tools": {t: asdict(e) for t, e in sorted(merged.items())}},
                              indent=2) + "\n")
    tmp.replace(target)
    return target
