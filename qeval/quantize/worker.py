"""A quantizer that runs a worker script in its tool's own Python (versions pinned apart from qeval's).

The worker reads a JSON spec and writes a checkpoint folder; it appears under its final name only once
complete (written to a temporary folder, then renamed), so an interrupted run never leaves half of one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..engines.process import ServerProcess, pid_alive
from ..errors import MissingEnvError, QuantizeError
from ..hashing import key_hash, stable_hash, tree_hash
from .base import QuantizerBase
from .calibration import calibration_texts

if TYPE_CHECKING:
    from ..engines.spec import EngineSpec
    from ..settings import Runtime
    from .base import QuantizeTarget

WORKERS = Path(__file__).resolve().parent.parent / "workers"


def _clear_abandoned(out: Path) -> None:
    """Remove temporary folders (and spec files) of this output left by a process that was killed;
    a live process's folder is another campaign at work on the same variant, and is left alone."""
    for stale in out.parent.glob(out.name + ".tmp-*"):
        pid = stale.name.rsplit(".tmp-", 1)[1].split(".")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


class WorkerQuantizer(QuantizerBase):
    worker: Path
    version: str  # the version it was written for; the key takes the installed one where it is found
    dist: str = ""  # its distribution's name, to read the installed version
    done_file = "config.json"  # what a finished output folder always holds

    def __init__(self, runtime: "Runtime", engine: "EngineSpec | None" = None, dtype: str = "bfloat16"):
        # dtype: what the tool computes in (the campaign's choice: float32 on a CPU without native bf16)
        self.runtime, self.engine, self.dtype = runtime, engine, dtype

    def spec(self, base: Path, variant: "QuantizeTarget") -> dict:
        raise NotImplementedError

    def inputs(self, variant: "QuantizeTarget") -> dict:
        """What the worker reads besides its spec that is no part of the key (paths of inputs keyed by content)."""
        return {}

    def cache_extra(self) -> dict:
        """What else decides the output besides base, recipe, tool and worker (e.g. the GPU it is built for)."""
        return {}

    def cache_key(self, base: Path, variant: "QuantizeTarget") -> str:
        tool = (self.runtime.version_of(self.dist) if self.dist else "") or self.version
        return key_hash({"base": tree_hash(base), "recipe": self.spec(base, variant), "tool": tool,
                         "worker": stable_hash(self.worker.read_text()), **self.cache_extra()})

    def quantize(self, base: Path, variant: "QuantizeTarget", out: Path, log: Path,
                 progress: Callable[[str], None] | None = None) -> Path:
        _clear_abandoned(out)  # what a killed run left, also when another run has since finished the variant
        if (out / self.done_file).is_file():
            return out  # cached
        if not self.runtime.exists():
            raise MissingEnvError(f"the {self.name} environment", self.runtime.location, self.install_hint)
        tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        spec = self.spec(base, variant) | {"base": str(base), "out": str(tmp)} | self.inputs(variant)
        if "calibration_path" not in spec:  # the offline default, as text
            spec["calibration"] = calibration_texts()
        if self.engine is not None and self.engine.trust_remote_code:
            spec["trust_remote_code"] = True
        # this process's own spec beside its own folder (not tmp.with_suffix, which would drop ".tmp-PID" and
        # give every campaign making this variant one shared spec file)
        spec_file = out.with_name(tmp.name + ".json")
        spec_file.write_text(json.dumps(spec))
        env = self.runtime.env(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
        # its own process group, dying with qeval; on Ctrl-C / SIGTERM its whole group is ended
        worker = ServerProcess([str(self.runtime.python), str(self.worker), str(spec_file)], env, log)
        try:
            rc = worker.run()
            if rc != 0 or not (tmp / self.done_file).is_file():
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
                raise QuantizeError(f"{self.name} failed for variant {variant.name!r} (exit {rc}); log: {log}\n{tail}")
            try:
                tmp.rename(out)
            except OSError:
                if not (out / self.done_file).is_file():
                    raise
                # another campaign made the same variant first: same key, so the same inputs; keep theirs
        finally:
            spec_file.unlink(missing_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
        return out
