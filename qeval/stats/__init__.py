"""Pure statistics: numpy arrays in, frozen dataclasses out. No I/O, no tracking, no engines."""

from .decisions import Decision, decide
from .intervals import (BootstrapCI, MeanDelta, clustered_mean_delta, mean_delta, paired_bootstrap_ci,
                        paired_bootstrap_t_ci, paired_proportion_ci)
from .multiplicity import adjust
from .paired import (Flips, TestResult, effect_size_dz, flips, is_binary, mcnemar_chi2, mcnemar_exact,
                     sign_flip_permutation, wilcoxon)
from .power import (Power, clustered, design_effect, discordance_upper, mde, n_required, n_required_clustered, observed_power,
                    planned_power)

__all__ = ["BootstrapCI", "Decision", "Flips", "MeanDelta", "Power", "TestResult", "adjust", "clustered",
           "clustered_mean_delta", "decide", "design_effect", "discordance_upper", "effect_size_dz", "flips", "is_binary", "mcnemar_chi2", "mcnemar_exact",
           "mde", "mean_delta", "n_required", "n_required_clustered", "observed_power", "planned_power",
           "paired_bootstrap_ci", "paired_bootstrap_t_ci", "paired_proportion_ci", "sign_flip_permutation", "wilcoxon"]
