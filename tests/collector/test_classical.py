"""fwbench.collector.stats.classical against scipy.stats, which it replaces at the end of every
run: Student's t, Welch's t with its interval, and the two-sided Mann-Whitney U (exact and
normal, with and without ties, samples of the sizes runs have: 2 to a few thousand)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from fwbench.collector.stats.classical import mann_whitney_p, t_ppf, t_sf, welch_t


@pytest.mark.parametrize("df", [1.0, 2.5, 7.0, 30.0, 1e4])
@pytest.mark.parametrize("value", [-3.0, -0.4, 0.0, 1.2, 6.0])
def test_student_t_is_scipys(df: float, value: float) -> None:
    assert t_sf(value, df) == pytest.approx(stats.t.sf(value, df), rel=1e-12, abs=1e-300)
    probability = stats.t.cdf(value, df)
    assert t_ppf(probability, df) == pytest.approx(value, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("sizes", [(2, 2), (3, 7), (12, 5), (40, 40)])
def test_welch_is_scipys_ttest_ind(sizes: tuple[int, int]) -> None:
    rng = np.random.default_rng(sum(sizes))
    first, second = rng.normal(1.0, 0.2, sizes[0]), rng.normal(1.1, 0.5, sizes[1])
    ours = welch_t(first, second)
    theirs = stats.ttest_ind(first, second, equal_var=False)
    assert ours.p_value == pytest.approx(theirs.pvalue, rel=1e-10)
    assert ours.difference / ours.scale == pytest.approx(theirs.statistic, rel=1e-12)
    assert ours.interval(0.95) == pytest.approx(tuple(theirs.confidence_interval(0.95)), rel=1e-10)


def test_welch_refuses_two_samples_without_spread() -> None:
    with pytest.raises(ValueError, match="spread"):
        welch_t(np.array([1.0, 1.0]), np.array([2.0, 2.0]))


def _samples(kind: str, n1: int, n2: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    if kind == "tied":  # timings of a coarse clock: few distinct values
        return rng.integers(0, 6, n1).astype(float), rng.integers(1, 7, n2).astype(float)
    return rng.lognormal(0.0, 0.1, n1), rng.lognormal(0.05, 0.1, n2)


@pytest.mark.parametrize("kind", ["distinct", "tied"])
@pytest.mark.parametrize(
    "sizes", [(1, 1), (1, 9), (2, 3), (5, 5), (8, 8), (8, 300), (3, 2000), (9, 9), (50, 70)]
)
def test_mann_whitney_is_scipys(kind: str, sizes: tuple[int, int]) -> None:
    for seed in range(6):
        first, second = _samples(kind, *sizes, seed)
        theirs = stats.mannwhitneyu(first, second, alternative="two-sided").pvalue
        if np.ptp(np.concatenate([first, second])) == 0:
            assert mann_whitney_p(first, second) == 1.0
            continue
        assert mann_whitney_p(first, second) == pytest.approx(theirs, rel=1e-9, abs=1e-15)


def test_mann_whitney_exact_tail_is_right_far_out() -> None:
    """Far apart samples: the exact p is the two arrangements out of C(n1 + n2, n1), which a
    subtraction in floating point would lose."""
    first, second = np.arange(8.0), np.arange(100.0, 1100.0)
    p = mann_whitney_p(first, second)
    assert p == pytest.approx(stats.mannwhitneyu(first, second).pvalue, rel=1e-12)
    assert p > 0


def test_mann_whitney_refuses_an_empty_side() -> None:
    with pytest.raises(ValueError, match="both sides"):
        mann_whitney_p(np.array([]), np.array([1.0]))
