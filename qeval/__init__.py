"""qeval: is this quantized variant no worse than the baseline, and what does it buy?"""

from typing import Any

__all__ = ["CampaignConfig", "CampaignResult", "Settings", "compare", "load_config", "run"]

# imported on first use: `qeval --help` and a config error must not pay for scipy and the pipeline
_WHERE = {"CampaignConfig": "config", "load_config": "config", "Settings": "settings",
          "CampaignResult": "pipeline.campaign", "run": "pipeline.campaign", "compare": "pipeline.imported"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'qeval' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"qeval.{_WHERE[name]}"), name)
