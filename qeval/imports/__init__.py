"""Per-item results another evaluator already wrote, read into qeval's records: one importer per format.

A format's importer is registered like an engine or a scorer: the built-ins by module name (imported only when
named), a plugin through the `qeval.importers` entry point group, each a subclass of `imports.base.Importer`.
"""

from __future__ import annotations

from ..registry import Registry

IMPORTERS = Registry("result format", entry_point_group="qeval.importers",
                     modules={"lm_eval": "qeval.imports.lmeval", "inspect": "qeval.imports.inspect_log",
                              "mlflow": "qeval.imports.mlflow_eval"},
                     base="qeval.imports.base:Importer")
