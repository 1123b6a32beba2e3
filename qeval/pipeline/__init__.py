"""The pipeline, stage by stage: plan -> variant (quantize, serve, suites, probe, grid) behind an executor ->
judge (compare, gate) -> publish (report, MLflow); resume reads what an earlier run left; power plans sizes."""

from typing import Any

__all__ = ["Campaign", "CampaignResult", "Plan", "VariantPlan", "finish", "run"]

# imported on first use: the config imports the executor's spec from here, and must not pull the pipeline
_WHERE = {"Campaign": "campaign", "CampaignResult": "campaign", "finish": "campaign", "run": "campaign",
          "Plan": "plan", "VariantPlan": "plan"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'qeval.pipeline' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"qeval.pipeline.{_WHERE[name]}"), name)
