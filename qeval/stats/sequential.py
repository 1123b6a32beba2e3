"""Anytime-valid paired non-inferiority gates: decide at planned looks without inflating false passes.

Two methods, both over the paired per-item differences d = variant - baseline, oriented so that
positive is better, in the order the items were evaluated (a seeded order shared by every variant):

- ``gsd``: a group-sequential design (Jennison & Turnbull, *Group Sequential Methods with
  Applications to Clinical Trials*, 2000, ch. 7 and 19). The looks are fixed in advance (every
  ``look_every`` items from ``min_items``, and always the full n). PASS needs the z statistic of
  H0: delta <= -margin to cross an efficacy boundary from Lan & DeMets' O'Brien-Fleming-type
  alpha-spending function (Lan & DeMets 1983, Biometrika 70:659); its last look is the full n, so
  the whole design spends exactly alpha and an undecided gate at n is read against the last
  boundary, never a fresh fixed-n test at full alpha. The efficacy boundaries ignore the FAIL rule
  (non-binding futility), so stopping early for FAIL can only lower the false-pass rate. FAIL at an
  interim look when the repeated confidence interval's upper bound is below -margin, or when a
  futility bound is (beta-spending at the design alternative delta = 0: it spends at most
  ``futility`` of the power). The price: the last boundary sits a little above z_(1-alpha) and the
  futility rule spends some power: 0.77-0.79 where fixed n has 0.79-0.82, and at delta = -2 margin
  it stops after 27-30% of the items (benchmarks/sequential_gates.py).
  The statistic: for 0/1 scores Tango's score statistic (qeval/stats/exact.py), whose standard
  error is the one under delta = -margin: the observed one understates it when flips are few
  (exact false-pass rate 6.4% at n = 300, margin 0.05, flip rate 0.1); with the score, summed over
  every outcome, it is at most 5.03% without the FAIL rule and under 5% with it
  (tests/stats/test_sequential.py). Otherwise the paired t statistic read as normal (as the fixed-n
  t gate), which needs a finite variance, nothing more: bounded or not, a continuous metric works.
- ``betting``: a betting confidence sequence (Waudby-Smith & Ramdas, "Estimating means of bounded
  random variables by betting", JRSS-B 86(1), 2024; arXiv 2010.09686) with their predictable
  plug-in (PrPl) bets. PASS and FAIL each read one side's capital, a one-sided test at alpha by
  Ville's inequality, valid at every item and not only at the looks, with no normal
  approximation, for differences bounded in [-bound, bound] (scores in [0, 1] give bound = 1; a
  continuous metric bounded in [lo, hi] gives bound = hi - lo). Unbounded metrics (NLL,
  perplexity, KL) are refused. The price: at the full n its bound is much wider than a fixed-n
  one, so power there is far lower (0.38-0.43 where fixed n has 0.8, in the benchmark).

Items in groups (several questions on one passage): ``gsd`` looks only between groups and reads the
cluster-robust CR2 standard error with Bell-McCaffrey degrees of freedom, as the fixed-n gate does;
``betting`` refuses them rather than treat correlated items as independent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Literal, Sequence

import numpy as np
from scipy import optimize, stats

from .decisions import Finding
from .exact import restricted_loss_rate
from .intervals import clustered_mean_delta

LookVerdict = Literal["PASS", "FAIL", "INCONCLUSIVE", "UNDECIDED"]
# a sequential gate's finding: a fixed-n one's (decisions.py), or futile (FAIL at an interim look on the
# futility bound: a PASS at the full n had become unlikely, which is not "worse than the margin"), or
# undecided (no boundary crossed yet)
LookFinding = Literal[Finding, "futile", "undecided"]
_GRID_SD = 8.0  # the score's density is negligible beyond 8 sd of its mean
MAX_LOOKS = 100  # each look costs a grid integration (~5 ms); more looks buy little (Jennison & Turnbull)
_BET_TRUNCATION = 0.5  # Waudby-Smith & Ramdas's c: a bet never stakes more than half the capital


def look_schedule(n: int, look_every: int, min_items: int) -> tuple[int, ...]:
    """The items at which a gate looks: min_items, then every look_every, and the full n last."""
    if n < 1 or look_every < 1 or min_items < 1:
        raise ValueError("n, look_every and min_items must be positive")
    looks = list(range(min(min_items, n), n, look_every))
    return tuple(looks + [n])


def obf_spending(tau: np.ndarray | float, alpha: float) -> np.ndarray:
    """Lan-DeMets O'Brien-Fleming-type alpha spent by information fraction tau (one-sided alpha)."""
    t = np.clip(np.asarray(tau, float), 1e-12, 1.0)
    return 2.0 * (1.0 - stats.norm.cdf(stats.norm.ppf(1.0 - alpha / 2.0) / np.sqrt(t)))


def linear_spending(tau: np.ndarray | float, total: float) -> np.ndarray:
    """Power spent by the futility rule: in proportion to the information, so early looks may stop."""
    return total * np.clip(np.asarray(tau, float), 0.0, 1.0)


@dataclass(frozen=True)
class Design:
    """A group-sequential design on the z scale: look k decides PASS at z >= efficacy[k] and FAIL at
    z <= failure[k] (interim looks only; -inf: no FAIL there)."""

    looks: tuple[int, ...]
    alpha: float
    futility: float
    drift: float  # E z at the full n when delta = 0 (margin sqrt(n) / sigma): where power is spent
    efficacy: tuple[float, ...]
    failure: tuple[float, ...]


class _Density:
    """The sub-density of the score S = z sqrt(tau) on a grid, over the paths still undecided."""

    def __init__(self, s: np.ndarray, f: np.ndarray):
        self.s, self.f = s, f

    def weights(self) -> np.ndarray:  # Simpson's rule (odd number of points); one point: a point mass
        if len(self.s) == 1:
            return np.ones(1)
        h = self.s[1] - self.s[0]
        w = np.ones(len(self.s))
        w[1:-1:2], w[2:-1:2] = 4.0, 2.0
        return w * h / 3.0

    def above(self, c: float, step: float, mean: float) -> float:
        """P(undecided so far and S + N(mean, step) >= c)."""
        return float(self.weights() @ (self.f * stats.norm.sf((c - self.s - mean) / math.sqrt(step))))

    def below(self, c: float, step: float, mean: float) -> float:
        return float(self.weights() @ (self.f * stats.norm.cdf((c - self.s - mean) / math.sqrt(step))))

    def advance(self, lo: float, hi: float, step: float, mean: float, points: int) -> "_Density":
        s = np.linspace(lo, hi, points)
        kernel = stats.norm.pdf((s[:, None] - self.s[None, :] - mean) / math.sqrt(step)) / math.sqrt(step)
        return _Density(s, kernel @ (self.weights() * self.f))


def _start() -> _Density:
    # the score at tau = 0: a point mass at 0, so the first look's step is its whole information
    return _Density(np.array([0.0]), np.array([1.0]))


def _grid(tau: float, drift: float, lo: float, hi: float, step_sd: float) -> tuple[float, float, int]:
    lo, hi = max(lo, drift * tau - _GRID_SD * math.sqrt(tau)), min(hi, drift * tau + _GRID_SD * math.sqrt(tau))
    points = max(3, int(math.ceil((hi - lo) / (step_sd / 6.0))) | 1)  # 6 points per increment sd, odd
    return lo, hi, min(points, 2001)


def _solve(p: Callable[[float], float], target: float) -> float:
    """The boundary c with p(c) = target, p decreasing in c (a crossing probability above c)."""
    if target <= 0:
        return 20.0
    if p(-20.0) <= target:
        return -20.0
    return float(optimize.brentq(lambda c: p(c) - target, -20.0, 20.0, xtol=1e-9))


@lru_cache(maxsize=256)  # pure and costly (~0.1 s): every gate of a campaign shares one design
def design(looks: tuple[int, ...], alpha: float, futility: float = 0.0, drift: float = 0.0) -> Design:
    """The boundaries for these looks (the last one is the full n): efficacy by O'Brien-Fleming-type
    alpha spending at delta = -margin (drift 0), computed as if there were no FAIL rule (non-binding);
    then FAIL boundaries by linear spending of `futility` at delta = 0 (drift `drift`), each at least
    minus the efficacy one (where the repeated interval's upper bound is below -margin).
    Armitage-McPherson-Rowe recursive integration on a grid (Jennison & Turnbull, ch. 19)."""
    if len(looks) > MAX_LOOKS or list(looks) != sorted(set(looks)) or looks[0] < 1:
        raise ValueError(f"looks must be increasing item counts, at most {MAX_LOOKS} of them (got {len(looks)}): "
                         "give a larger look_every")
    n = looks[-1]
    taus = [k / n for k in looks]
    spent = obf_spending(np.array(taus), alpha)
    efficacy: list[float] = []
    dens, prev = _start(), 0.0
    for k, tau in enumerate(taus):
        step = tau - prev
        target = spent[k] - (spent[k - 1] if k else 0.0)
        c = _solve(lambda z: dens.above(z * math.sqrt(tau), step, 0.0), target)
        efficacy.append(c)
        if k < len(taus) - 1:
            lo, hi, pts = _grid(tau, 0.0, -math.inf, c * math.sqrt(tau), math.sqrt(taus[k + 1] - tau))
            dens = dens.advance(lo, hi, step, 0.0, pts)
        prev = tau
    failure = [-math.inf] * len(taus)
    if futility > 0:
        fspent = linear_spending(np.array(taus), futility)
        dens, prev = _start(), 0.0
        for k, tau in enumerate(taus[:-1]):
            step, mean = tau - prev, drift * (tau - prev)
            target = fspent[k] - (fspent[k - 1] if k else 0.0)
            b = -_solve(lambda z: dens.below(-z * math.sqrt(tau), step, mean), target)
            b = min(max(b, -efficacy[k]), efficacy[k])
            failure[k] = b
            lo, hi, pts = _grid(tau, drift, b * math.sqrt(tau), efficacy[k] * math.sqrt(tau),
                                math.sqrt(taus[k + 1] - tau))
            dens = dens.advance(lo, hi, step, mean, pts)
            prev = tau
    else:
        failure[:-1] = [-c for c in efficacy[:-1]]
    return Design(looks, alpha, futility, drift, tuple(efficacy), tuple(failure))


@dataclass(frozen=True)
class Look:
    items: int
    mean: float
    # the repeated (1 - alpha) bounds at this look, mean -+ boundary x standard error (for 0/1 scores the
    # standard error under delta = -margin, so that they decide at -margin exactly as the score does);
    # nan for the betting method, whose decision is its capital
    lower: float
    upper: float
    verdict: LookVerdict
    finding: LookFinding


@dataclass(frozen=True)
class SequentialResult:
    method: str
    margin: float
    alpha: float
    n_planned: int
    looks: tuple[Look, ...]  # the looks taken, up to and including the deciding one
    verdict: LookVerdict  # UNDECIDED: fewer than n_planned items and no boundary crossed
    reason: str

    @property
    def items_used(self) -> int:
        return self.looks[-1].items if self.looks else 0

    @property
    def finding(self) -> LookFinding:
        """What the deciding look showed (decisions.py's words; futile, undecided)."""
        return self.looks[-1].finding if self.looks else "undecided"


def _check(d: np.ndarray, n_planned: int) -> np.ndarray:
    x = np.asarray(d, float)
    if x.ndim != 1 or not np.isfinite(x).all():
        raise ValueError("differences must be a finite 1-D array")
    if len(x) > n_planned:
        raise ValueError(f"{len(x)} differences for a design of {n_planned} items")
    return x


def _grouped(groups: Sequence[object] | None) -> bool:
    return groups is not None and any(g is not None for g in groups)


def _null_se(y: np.ndarray, margin: float) -> float:
    """The standard error of a mean of 0/1 differences under delta = -margin (Tango's restricted MLE), so
    that (mean + margin) / se is his score statistic."""
    gains, losses = float((y > 0).sum()), float((y < 0).sum())
    x = float(restricted_loss_rate(np.array([gains]), np.array([losses]), len(y), margin)[0])
    return math.sqrt(max(2 * x - margin - margin * margin, 0.0) / len(y))


def cluster_looks(groups: Sequence[object], looks: tuple[int, ...]) -> tuple[int, ...]:
    """Each look moved to the end of the group it falls in, so that no group is split across a look;
    the groups must each be contiguous in the order (the pipeline shuffles groups, not items)."""
    labels = list(groups)
    if any(g is None for g in labels):
        raise ValueError("either every item has a group or none has")
    ends = [i + 1 for i in range(len(labels)) if i + 1 == len(labels) or labels[i + 1] != labels[i]]
    starts = [labels[e - 1] for e in ends]
    if len(set(starts)) != len(starts):
        raise ValueError("a group's items must be contiguous in the evaluation order")
    at = np.searchsorted(ends, looks)
    return tuple(sorted({ends[min(i, len(ends) - 1)] for i in at}))


def _look(t: int, n: int, mean: float, se: float, c: float, b: float, margin: float,
          mde: float | None) -> tuple[LookVerdict, LookFinding, str, float, float]:
    """One look's verdict and finding from the z statistic against its boundaries (efficacy c, FAIL b)."""
    lower, upper = mean - c * se, mean + c * se
    z = (mean + margin) / se if se > 0 else math.copysign(math.inf, mean + margin)
    underpowered, last, at = mde is not None and mde > margin, t == n, f"at {t} of {n} items"
    if z >= c and not underpowered:
        return "PASS", "shown_within", f"lower bound {lower:+.4f} > -margin {-margin:+.4f} {at}", lower, upper
    if upper < -margin:
        return "FAIL", "shown_worse", f"upper bound {upper:+.4f} < -margin {-margin:+.4f} {at}", lower, upper
    if z <= b and not last:
        return "FAIL", "futile", f"futility: z {z:+.2f} <= {b:+.2f} {at} (PASS at n is unlikely)", lower, upper
    if last and underpowered:
        return ("INCONCLUSIVE", "underpowered_within" if z >= c else "underpowered",
                f"suite detects only drops >= {mde:.4f} > margin {margin:.4f}", lower, upper)
    if last:
        return "FAIL", "not_shown_within", f"lower bound {lower:+.4f} <= -margin {-margin:+.4f} {at}", lower, upper
    return "UNDECIDED", "undecided", f"undecided {at}", lower, upper


def gsd_gate(d: np.ndarray, n_planned: int, margin: float, alpha: float, *, look_every: int, min_items: int,
             binary: bool, planning_sd: float, futility: float = 0.05, mde: float | None = None,
             groups: Sequence[object] | None = None) -> SequentialResult:
    """Walk the looks that the items so far reach and stop at the first decision (see the module doc).
    `planning_sd` is the design's sd of d (sqrt of the flip rate for 0/1 metrics; for grouped items the
    sd of their mean times sqrt(n), i.e. with the design effect), which places the futility spending;
    `mde` the planned MDE: above the margin the gate can only FAIL clearly or end INCONCLUSIVE, as the
    fixed-n gate. `groups`: one label per planned item (all n_planned, in order): then each look is at
    the end of a group and reads the cluster-robust CR2 standard error with Bell-McCaffrey df
    (qeval.stats.clustered_mean_delta), the boundaries moved to t quantiles at those df."""
    x = _check(d, n_planned)
    grouped = _grouped(groups)
    looks = look_schedule(n_planned, look_every, min_items)
    if grouped:
        if len(groups) != n_planned:
            raise ValueError(f"{len(groups)} group labels for a design of {n_planned} items: give every item's")
        looks = cluster_looks(groups, looks)
    elif binary and not np.isin(x, (-1.0, 0.0, 1.0)).all():
        raise ValueError("differences of 0/1 scores must be -1, 0 or 1")
    underpowered = mde is not None and mde > margin
    drift = margin * math.sqrt(n_planned) / planning_sd if planning_sd > 0 else math.inf
    des = design(looks, alpha, 0.0 if underpowered else futility, min(drift, 50.0))
    taken: list[Look] = []
    reason = "no look reached yet"
    for k, t in enumerate(looks):
        if t > len(x):
            break
        y = x[:t]
        c, b = des.efficacy[k], des.failure[k]
        if grouped:
            md = clustered_mean_delta(np.zeros(t), y, [str(g) for g in groups[:t]], adjustment="CR2")
            se = md.se
            # the normal boundary's tail probability, read on the t scale the clustered interval uses
            c, b = (float(stats.t.ppf(stats.norm.cdf(v), md.df)) if math.isfinite(v) else v for v in (c, b))
        else:
            se = _null_se(y, margin) if binary else (float(y.std(ddof=1)) if t > 1 else 0.0) / math.sqrt(t)
        verdict, finding, reason, lower, upper = _look(t, n_planned, float(y.mean()), se, c, b, margin, mde)
        taken.append(Look(t, float(y.mean()), lower, upper, verdict, finding))
        if verdict != "UNDECIDED":
            break
    kind = "clustered CR2, " if grouped else ""
    return SequentialResult(f"gsd ({kind}O'Brien-Fleming spending, {len(looks)} looks, futility {des.futility:g})",
                            margin, alpha, n_planned, tuple(taken), taken[-1].verdict if taken else "UNDECIDED",
                            reason)


def _to_unit(x: np.ndarray, bound: float) -> np.ndarray:
    if bound <= 0 or (np.abs(x) > bound).any():
        raise ValueError(f"the betting confidence sequence needs differences bounded in [-{bound:g}, {bound:g}]: "
                         "an unbounded metric (NLL, KL) is not supported")
    return (x + bound) / (2 * bound)


def plug_in_bets(y: np.ndarray, alpha: float) -> np.ndarray:
    """Waudby-Smith & Ramdas's predictable plug-in bets lambda_t (before truncation), for y in [0, 1]: each
    uses only the items before t."""
    t = np.arange(1, len(y) + 1)
    mus = (0.5 + np.cumsum(y)) / (t + 1)
    var = (0.25 + np.cumsum((y - mus) ** 2)) / (t + 1)  # sigma_hat^2_t
    var_prev = np.concatenate([[0.25], var[:-1]])
    return np.sqrt(2 * math.log(1 / alpha) / (var_prev * t * np.log(1 + t)))


def capital(y: np.ndarray, m: float | np.ndarray, alpha: float, side: Literal["+", "-"]) -> np.ndarray:
    """The wealth after each item of betting that the mean of y (in [0, 1]) is above m ('+') or below
    it ('-'); by Ville's inequality it reaches 1/alpha with probability <= alpha when the bet is wrong.
    An array of m gives one row per value."""
    lam = plug_in_bets(y, alpha)
    ms = np.atleast_1d(np.asarray(m, float))[:, None]
    if side == "+":
        k = np.cumprod(1 + np.minimum(lam, _BET_TRUNCATION / np.maximum(ms, 1e-12)) * (y - ms), axis=1)
    else:
        k = np.cumprod(1 - np.minimum(lam, _BET_TRUNCATION / np.maximum(1 - ms, 1e-12)) * (y - ms), axis=1)
    return k[0] if np.ndim(m) == 0 else k


def betting_cs(d: np.ndarray, alpha: float, bound: float = 1.0, grid: int = 401) -> tuple[np.ndarray, np.ndarray]:
    """The one-sided (1 - alpha) lower and upper confidence sequences of the mean of d after each item
    (each alone covers with probability >= 1 - alpha at every time at once), on a grid of `grid`
    candidate means, widened by one grid step so that the grid cannot make them liberal."""
    y = _to_unit(np.asarray(d, float), bound)
    ms = np.linspace(0.0, 1.0, grid)
    # a mean rejected once stays rejected: the running intersection, itself a confidence sequence
    ok_lo = np.maximum.accumulate(capital(y, ms, alpha, "+"), axis=1) < 1 / alpha
    ok_hi = np.maximum.accumulate(capital(y, ms, alpha, "-"), axis=1) < 1 / alpha
    lo = np.where(ok_lo.any(0), ms[np.argmax(ok_lo, axis=0)], 1.0)
    hi = np.where(ok_hi.any(0), ms[grid - 1 - np.argmax(ok_hi[::-1], axis=0)], 0.0)
    step = ms[1] - ms[0]
    return (np.clip(lo - step, 0, 1) * 2 - 1) * bound, (np.clip(hi + step, 0, 1) * 2 - 1) * bound


def betting_gate(d: np.ndarray, n_planned: int, margin: float, alpha: float, *, look_every: int, min_items: int,
                 bound: float = 1.0, mde: float | None = None,
                 groups: Sequence[object] | None = None) -> SequentialResult:
    """PASS once the capital bet on delta > -margin reaches 1/alpha, FAIL once the one bet on
    delta < -margin does, read at the looks; at the full n a gate still undecided has not shown
    non-inferiority: FAIL (INCONCLUSIVE when underpowered). Valid at any stopping time (Ville)."""
    if _grouped(groups):
        raise ValueError("the betting gate does not support items in groups: use method gsd for this suite")
    x = _check(d, n_planned)
    y = _to_unit(x, bound)
    m = (-margin + bound) / (2 * bound)
    up, down = capital(y, m, alpha, "+"), capital(y, m, alpha, "-")
    underpowered = mde is not None and mde > margin
    looks = look_schedule(n_planned, look_every, min_items)
    taken: list[Look] = []
    reason = "no look reached yet"
    for t in looks:
        if t > len(x):
            break
        passed, failed = up[:t].max() >= 1 / alpha, down[:t].max() >= 1 / alpha
        last = t == n_planned
        finding: LookFinding
        if passed and not underpowered:
            verdict, finding = "PASS", "shown_within"
            reason = f"capital on delta > -margin reached 1/alpha by {t} of {n_planned} items"
        elif failed:
            verdict, finding = "FAIL", "shown_worse"
            reason = f"capital on delta < -margin reached 1/alpha by {t} of {n_planned} items"
        elif last:
            verdict = "INCONCLUSIVE" if underpowered else "FAIL"
            # an underpowered gate whose PASS capital did reach 1/alpha: shown within, yet not trusted
            finding = ("underpowered_within" if passed else "underpowered") if underpowered else "not_shown_within"
            reason = (f"suite detects only drops >= {mde:.4f} > margin {margin:.4f}" if underpowered
                      else "non-inferiority not shown at the full n")
        else:
            verdict, finding, reason = "UNDECIDED", "undecided", f"undecided at {t} of {n_planned} items"
        taken.append(Look(t, float(x[:t].mean()), math.nan, math.nan, verdict, finding))
        if verdict != "UNDECIDED":
            break
    return SequentialResult("betting (Waudby-Smith & Ramdas 2023)", margin, alpha, n_planned, tuple(taken),
                            taken[-1].verdict if taken else "UNDECIDED", reason)
