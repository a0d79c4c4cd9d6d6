"""The classical tests the verdicts use: Student's t distribution, Welch's t on two samples and
the two-sided Mann-Whitney U, computed as scipy.stats computes them (tests/collector/
test_classical.py holds them to scipy.stats over ties, small and large samples) on
scipy.special's functions alone. scipy.stats takes about a second to import, which every
`collector run` paid at its end for three numbers; scipy.special takes a fifth of that."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

# scipy.stats.mannwhitneyu's method="auto": the exact distribution when a side has at most
# this many values and no value is tied, the normal approximation otherwise.
EXACT_AT_MOST = 8


def t_sf(statistic: float, df: float) -> float:
    """P(T > statistic) for Student's t with `df` degrees of freedom (scipy.stats.t.sf)."""
    from scipy.special import stdtr  # scipy when a figure is computed: a light start

    return float(stdtr(df, -statistic))


def t_ppf(probability: float, df: float) -> float:
    """The `probability` quantile of Student's t with `df` degrees of freedom."""
    from scipy.special import stdtrit

    return float(stdtrit(df, probability))


class WelchT(NamedTuple):
    """Welch's two-sample t on mean(first) - mean(second)."""

    difference: float
    scale: float  # the standard error of the difference
    df: float
    p_value: float  # two-sided

    def interval(self, confidence: float) -> tuple[float, float]:
        """The two-sided interval of the difference at `confidence` (0.95: 95%)."""
        half = t_ppf(1 - (1 - confidence) / 2, self.df) * self.scale
        return self.difference - half, self.difference + half


def welch_t(first: FloatArray, second: FloatArray) -> WelchT:
    """Welch's t (scipy.stats.ttest_ind with equal_var=False); ValueError when both samples
    have no spread, where the statistic is undefined."""
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    var_first, var_second = first.var(ddof=1) / len(first), second.var(ddof=1) / len(second)
    spread = var_first + var_second
    if not spread > 0:
        raise ValueError("Welch's t needs a spread in at least one sample")
    df = spread**2 / (var_first**2 / (len(first) - 1) + var_second**2 / (len(second) - 1))
    scale = math.sqrt(spread)
    difference = float(first.mean() - second.mean())
    return WelchT(difference, scale, df, min(1.0, 2 * t_sf(abs(difference) / scale, df)))


def mann_whitney_p(first: FloatArray, second: FloatArray) -> float:
    """The two-sided p-value of the Mann-Whitney U test (scipy.stats.mannwhitneyu, method
    "auto", continuity corrected): exact where a side has at most EXACT_AT_MOST values and
    nothing is tied, else the normal approximation with the tie correction."""
    first, second = np.asarray(first, dtype=np.float64), np.asarray(second, dtype=np.float64)
    n1, n2 = len(first), len(second)
    if not n1 or not n2:
        raise ValueError("the Mann-Whitney U test needs values on both sides")
    pooled = np.concatenate([first, second])
    values, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts  # values smaller than each distinct value
    ranks = below + (counts + 1) / 2  # average ranks, from 1
    u1 = float(ranks[inverse[:n1]].sum() - n1 * (n1 + 1) / 2)
    u = max(u1, n1 * n2 - u1)
    if min(n1, n2) <= EXACT_AT_MOST and len(values) == len(pooled):
        return min(1.0, 2 * _exact_sf(round(u), n1, n2))
    n = n1 + n2
    ties = float((counts.astype(np.float64) ** 3 - counts).sum())
    sd = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    if sd == 0:
        return 1.0  # every value tied: nothing to find
    z = (u - n1 * n2 / 2 - 0.5) / sd
    return min(1.0, math.erfc(z / math.sqrt(2)))  # 2 * P(Z > z)


def _exact_sf(u: int, n1: int, n2: int) -> float:
    """P(U >= u) under the null, with u at least n1 * n2 / 2: by symmetry P(U <= n1 n2 - u),
    the number of arrangements counted from the generating function of U, the Gaussian
    binomial coefficient prod_i (1 - q^(n2 + i)) / (1 - q^i) over i = 1..min(n1, n2), in
    whole numbers up to the power asked."""
    small, large = min(n1, n2), max(n1, n2)
    top = n1 * n2 - u
    ways = np.zeros(top + 1, dtype=object)
    ways[:] = 0
    ways[0] = 1
    for i in range(1, small + 1):
        shift = large + i
        if shift <= top:  # times (1 - q^shift)
            ways[shift:] = ways[shift:] - ways[: top + 1 - shift]
        for start in range(min(i, top + 1)):  # divided by (1 - q^i): sums i apart
            ways[start::i] = np.cumsum(ways[start::i])
    return int(ways.sum()) / math.comb(n1 + n2, small)
