"""Which qeval made a record: its version and commit, whether it runs installed or from a source tree.

Installed from a wheel: the version from the package's metadata, the commit stamped into the wheel when it was
built (qeval/_build_info.py, written by setup.py). From a source tree (pyproject.toml beside the package): the
version pyproject.toml says, the commit from git, "+dirty" when tracked files have changes; a copy of the tree
without .git falls back on the stamp, if any. What cannot be known is "unknown", never empty.

Standard library only: setup.py loads this file by its path, at build time, to stamp the commit.
"""

from __future__ import annotations

import json
import subprocess
import tomllib
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # qeval/ (this module lies in qeval/machine/)
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Provenance:
    version: str
    commit: str


def source_tree(package: Path = PACKAGE) -> Path | None:
    """The tree the package lies in, where pyproject.toml beside it is qeval's; None when it is installed."""
    try:
        project = tomllib.loads((package.parent / "pyproject.toml").read_text()).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return package.parent if project.get("name") == "qeval" else None


def git_commit(root: Path) -> str | None:
    """HEAD of the git checkout whose top is `root` ("+dirty" when tracked files differ from it); None where
    `root` is not the top of a checkout (a copy without .git, or a folder inside another project's repository)."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return None
    head = git("rev-parse", "HEAD")
    if not head:
        return None
    changes = git("status", "--porcelain", "--untracked-files=no")
    return head + ("+dirty" if changes else "")


def _stamp(package: Path) -> dict[str, str]:
    """What the build wrote into the package (VERSION, COMMIT), read as text: importing it would need the
    package importable under its name."""
    try:
        text = (package / "_build_info.py").read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip() in ("VERSION", "COMMIT"):
            try:
                out[key.strip()] = json.loads(value.strip())
            except ValueError:
                continue
    return out


def _installed_version(package: Path) -> str | None:
    """The version in qeval's metadata where that metadata is this package's: installed here, or an editable
    install of this very tree (another tree's editable install says nothing of this one)."""
    try:
        dist = metadata.distribution("qeval")
    except metadata.PackageNotFoundError:
        return None
    ours = package / "__init__.py"
    for f in dist.files or ():
        if str(f).replace("\\", "/") == "qeval/__init__.py" and Path(dist.locate_file(f)).resolve() == ours:
            return dist.version
    try:
        url = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return None
    editable = url.get("dir_info", {}).get("editable")
    if editable and url.get("url", "").removeprefix("file://") == str(package.parent):
        return dist.version
    return None


def provenance(package: Path = PACKAGE) -> Provenance:
    stamp = _stamp(package)
    tree = source_tree(package)
    if tree is not None:
        version = tomllib.loads((tree / "pyproject.toml").read_text())["project"].get("version")
        commit = git_commit(tree) or stamp.get("COMMIT")
    else:
        version = _installed_version(package) or stamp.get("VERSION")
        commit = stamp.get("COMMIT")
    return Provenance(version=version or UNKNOWN, commit=commit or UNKNOWN)
