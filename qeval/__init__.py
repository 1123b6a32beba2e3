"""qeval: is this quantized variant no worse than the baseline, and what does it buy?"""

from .campaign import CampaignResult, run
from .config import CampaignConfig, load_config
from .settings import Settings

__all__ = ["CampaignConfig", "CampaignResult", "Settings", "load_config", "run"]
