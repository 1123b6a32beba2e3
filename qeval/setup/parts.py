"""A kit's layout: files cut into pieces of at most SIZE and packed into part folders part-001/, part-002/, ...
each at most SIZE in total (a host that receives files in bounded transfers takes one folder per transfer);
part-001/ also holds install.sh and manifest.json, which names every file (size, sha256) and each piece
(folder, offset, size, sha256). Pure functions over a folder of files: no network."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

MANIFEST = "manifest.json"
INSTALLER = "install.sh"
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
