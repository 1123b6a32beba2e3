"""Every branch of decide: its verdict and the finding it rests on, for each mode (pure)."""

from typing import get_args

import pytest

from qeval.record.run import GateFinding
from qeval.stats import decide
from qeval.stats.decisions import Finding
from qeval.stats.sequential import LookFinding

M = 0.05


@pytest.mark.parametrize("low, high, mde, verdict, finding", [
    (-0.02, 0.03, None, "PASS", "shown_within"),
    (-0.02, 0.03, 0.04, "PASS", "shown_within"),  # powered: mde <= margin
    (-0.3, -0.1, None, "FAIL", "shown_worse"),  # the upper bound below -margin: clearly worse
    (-0.3, -0.1, 0.2, "FAIL", "shown_worse"),  # clearly worse, however small the suite
    (-0.08, 0.03, None, "FAIL", "not_shown_within"),  # straddles -margin, mde unknown
    (-0.08, 0.03, 0.04, "FAIL", "not_shown_within"),  # straddles -margin, powered
    (-0.08, 0.03, 0.2, "INCONCLUSIVE", "underpowered"),  # straddles, and the suite could not tell
    (-0.02, 0.03, 0.2, "INCONCLUSIVE", "underpowered_within"),  # inside the margin, yet planned underpowered
])
def test_noninferiority(low, high, mde, verdict, finding):
    d = decide("noninferiority", low, high, margin=M, mde=mde)
    assert (d.verdict, d.finding) == (verdict, finding)


def test_the_two_fails_differ_only_in_the_upper_bound():
    """The two non-inferiority FAILs of one lower bound: the upper bound alone sets them apart."""
    assert decide("noninferiority", -0.106, 0.027, margin=0.10).finding == "not_shown_within"
    assert decide("noninferiority", -0.9, -0.755 + 0.1, margin=0.10).finding == "shown_worse"
    assert decide("noninferiority", -0.2, -0.1, margin=0.10).finding == "not_shown_within"  # on -margin: not below


@pytest.mark.parametrize("low, high, mde, verdict, finding", [
    (-0.02, 0.03, None, "PASS", "shown_within"),
    (-0.3, -0.1, 0.2, "FAIL", "shown_worse"),  # below the band
    (0.06, 0.2, 0.2, "FAIL", "shown_better"),  # above it: not equivalent either
    (-0.02, 0.07, None, "FAIL", "not_shown_within"),  # straddles the band's upper end
    (-0.07, 0.02, None, "FAIL", "not_shown_within"),  # and its lower end
    (-0.07, 0.07, 0.2, "INCONCLUSIVE", "underpowered"),
    (-0.02, 0.03, 0.2, "INCONCLUSIVE", "underpowered_within"),
])
def test_equivalence(low, high, mde, verdict, finding):
    d = decide("equivalence", low, high, margin=M, mde=mde)
    assert (d.verdict, d.finding) == (verdict, finding)


@pytest.mark.parametrize("low, high, mde, verdict, finding", [
    (0.06, 0.1, None, "PASS", "shown_better"),
    (0.06, 0.1, 0.2, "PASS", "shown_better"),  # shown, however small the suite
    (0.01, 0.1, None, "FAIL", "not_shown_better"),  # straddles +margin
    (-0.02, 0.04, None, "FAIL", "shown_not_better"),  # the upper bound below +margin
    (0.01, 0.1, 0.2, "INCONCLUSIVE", "underpowered"),
])
def test_superiority(low, high, mde, verdict, finding):
    d = decide("superiority", low, high, margin=M, mde=mde)
    assert (d.verdict, d.finding) == (verdict, finding)


def test_the_record_knows_every_finding():
    """A finding decide or a sequential look gives must load in a run record."""
    assert set(get_args(Finding)) <= set(get_args(LookFinding)) <= set(get_args(GateFinding))


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        decide("noninferiority", -0.1, 0.1, margin=-0.01)
    with pytest.raises(ValueError):
        decide("inferiority", -0.1, 0.1, margin=0.05)  # type: ignore[arg-type]
