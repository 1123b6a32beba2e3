"""Pure statistics: numpy arrays in, frozen dataclasses out. No I/O, no tracking, no engines."""

from .paired import (BootstrapCI, Flips, MeanDelta, McNemar, NonInferiority, flips, mcnemar_exact,
                     mean_delta, noninferiority, paired_bootstrap_ci)

__all__ = ["BootstrapCI", "Flips", "MeanDelta", "McNemar", "NonInferiority", "flips", "mcnemar_exact",
           "mean_delta", "noninferiority", "paired_bootstrap_ci"]
