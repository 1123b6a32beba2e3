"""Build the tool envs of one device table: each returns at once when its stamp holds its spec hash, and a
half-built one (no stamp) is rebuilt from scratch. Every step's output goes to a log under envs/.logs/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..errors import QevalError
from ..progress import Reporter
from . import stamp
from .envs import ToolEnv, lock_path


class SetupError(QevalError):
    """A setup step failed (exit 3): names the step and the log holding pip's output."""

    def __init__(self, step: str, log: Path, detail: str = ""):
        self.step, self.log = step, log
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:]) if log.is_file() else ""
        super().__init__(f"setup step '{step}' failed{': ' + detail if detail else ''}; log: {log}"
                         + (f"\n--- log (tail) ---\n{tail}" if tail else ""))


@dataclass(frozen=True)
class Source:
    """Where pip finds packages: its index (default) or a folder of wheels, offline."""

    wheelhouse: Path | None = None

    def args(self) -> list[str]:
        return ["--no-index", "--find-links", str(self.wheelhouse)] if self.wheelhouse else []


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    # the caller's venv / path must not leak into an env that pins different versions
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"))}
    env.update(extra or {})
    return env


def run_step(step: str, cmd: list[str], log: Path, env: dict[str, str] | None = None) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            code = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env or clean_env()).returncode
        except OSError as e:  # no such interpreter: the env it runs in is missing
            raise SetupError(step, log, str(e)) from None
    if code != 0:
        raise SetupError(step, log, f"exit {code}")


# Every site dir an interpreter imports from: those of its own venv, those a .pth file adds, the system's.
_SITE_DIRS = ("import os, sys; print('\\n'.join(p for p in sys.path "
              "if os.path.basename(p) in ('site-packages', 'dist-packages') and os.path.isdir(p)))")
INHERITED_PTH = "qeval-inherited.pth"


def inherit_sites(base_python: str, python: Path, log: Path) -> None:
    """Make a venv created with --system-site-packages see every package `base_python` sees. Python's venv gives
    it only the base installation's site dirs, so a venv made from an interpreter that is itself a venv (CUDA
    images commonly ship torch in one) would not see that venv's torch: a .pth file in the new venv names them."""
    def dirs(py: str | Path) -> list[str]:
        out = subprocess.run([str(py), "-s", "-c", _SITE_DIRS], capture_output=True, text=True, env=clean_env())
        if out.returncode != 0:
            raise SetupError("list site dirs", log, out.stderr.strip()[-500:])
        return [d for d in out.stdout.splitlines() if d]
    own = dirs(python)
    missing = [d for d in dirs(base_python) if d not in own]
    if missing:
        (Path(own[0]) / INHERITED_PTH).write_text("\n".join(missing) + "\n")
        with log.open("a") as f:
            f.write(f"# {INHERITED_PTH}: {', '.join(missing)}\n")


_VERSIONS = ("import json, importlib.metadata as m; "
             "print(json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))")


def lacking(lock: Path, python: Path, log: Path) -> Path:
    """The lock's pins that `python` does not already have. An overlay is installed with pip's --target, which
    ignores what the interpreter has: on an image whose packages the envs see, a pin it has at that version (a
    local label such as +cu130 aside) would be looked for again, and a kit made with --have does not carry it."""
    out = subprocess.run([str(python), "-c", _VERSIONS], capture_output=True, text=True, env=clean_env())
    if out.returncode != 0:
        raise SetupError("list installed versions", log, out.stderr.strip()[-500:])
    have = {stamp.normalize(n): v for n, v in json.loads(out.stdout).items()}
    kept = []
    for line in lock.read_text().splitlines():
        name, _, version = line.split("#")[0].strip().partition("==")
        if not version or not stamp.holds(have, {name: version.strip()}):
            kept.append(line)
    filtered = log.with_suffix(f".{lock.name}")
    filtered.write_text("\n".join(kept) + "\n")
    return filtered


@dataclass
class EnvBuilder:
    cache: Path
    reporter: Reporter
    source: Source = Source()
    system_site_packages: bool = False
    base_python: str = sys.executable  # the interpreter the venvs are made from

    @property
    def envs_dir(self) -> Path:
        return self.cache / "envs"

    def folder(self, env: ToolEnv) -> Path:
        return self.envs_dir / env.name

    def python_of(self, env: ToolEnv, by_tool: dict[str, ToolEnv]) -> Path:
        """The interpreter that runs this tool: its venv's, or for an overlay the one of the env it sits on."""
        owner = by_tool[env.overlay_of] if env.overlay_of else env
        return self.folder(owner) / "bin" / "python"

    def _site_roots(self, env: ToolEnv) -> list[Path]:
        folder = self.folder(env)
        return [folder] if env.overlay_of else sorted(folder.glob("lib/python*/site-packages"))

    def build(self, env: ToolEnv, by_tool: dict[str, ToolEnv]) -> str:
        """Build `env` unless current; returns what was done: "current", "adopted" or "built"."""
        folder, spec = self.folder(env), env.spec_hash()
        if stamp.is_current(folder, spec):
            self.reporter.log(f"{env.name}: current ({folder})")
            return "current"
        if stamp.is_legacy(folder) and stamp.holds(stamp.versions_in(self._site_roots(env)), env.pins):
            stamp.write(folder, spec)
            self.reporter.log(f"{env.name}: built earlier with the pinned versions, kept ({folder})")
            return "adopted"
        log = self.envs_dir / ".logs" / f"{env.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text("")
        python = self.python_of(env, by_tool)
        with self.reporter.step(f"{env.name}: building (log: {log})"):
            shutil.rmtree(folder, ignore_errors=True)  # a half-built env is rebuilt from scratch
            if env.overlay_of:
                if not python.exists():
                    raise SetupError(f"{env.name}: find {env.overlay_of} env", log,
                                     f"{python} is missing: build the {env.overlay_of} env first")
                folder.mkdir(parents=True)
                pip = [str(python), "-m", "pip", "install", "-q", "--target", str(folder)]
            else:
                venv = [self.base_python, "-m", "venv"] + (["--system-site-packages"] if self.system_site_packages
                                                            else []) + [str(folder)]
                run_step(f"{env.name}: create venv", venv, log)
                if self.system_site_packages:
                    inherit_sites(self.base_python, python, log)
                pip = [str(python), "-m", "pip", "install", "-q"]
            for args in env.installs:
                args = [str(lock_path(a.split("/", 1)[1])) if a.startswith("locks/") else a for a in args]
                if env.overlay_of and self.system_site_packages:  # only what the interpreter lacks
                    args = [str(lacking(Path(a), python, log)) if a.endswith(".txt") else a for a in args]
                run_step(f"{env.name}: pip install {' '.join(args)}", pip + self.source.args() + args, log)
            if env.uninstall:
                run_step(f"{env.name}: pip uninstall {' '.join(env.uninstall)}",
                         [str(python), "-m", "pip", "uninstall", "-q", "-y", *env.uninstall], log)
            extra = {"PYTHONPATH": str(folder)} if env.overlay_of else {}
            run_step(f"{env.name}: check", [str(python), "-c", env.check], log, clean_env(extra))
            stamp.write(folder, spec)
        self.reporter.log(f"{env.name}: built ({folder})")
        return "built"
