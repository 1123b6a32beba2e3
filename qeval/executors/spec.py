"""Executor settings, one model per executor kind: `kind` picks it (`executor: {kind: local}`), and each
executor class names its own as `Spec`, so a kind registered in EXECUTORS (a plugin's through the entry point
group `qeval.executors`) brings its settings with it."""

from __future__ import annotations

from typing import ClassVar, Literal

from ..registry import Registry
from ..validation import Kinded

# the built-ins by module name: imported only when a campaign names their kind (Ray's is an optional dependency)
EXECUTORS = Registry("executor", entry_point_group="qeval.executors",
                     modules={"local": "qeval.executors.local", "ray": "qeval.executors.ray"})


class ExecutorSpec(Kinded):
    """Where the variants run. Validated as ExecutorSpec, a spec becomes its kind's model."""

    default_kind: ClassVar[str] = "local"
    kind: str = "local"

    @classmethod
    def model_for(cls, kind: str) -> type["ExecutorSpec"]:
        return EXECUTORS.get(kind).Spec


class LocalExecutorSpec(ExecutorSpec):
    kind: Literal["local"] = "local"
