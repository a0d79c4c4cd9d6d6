"""Is one set of step times faster than another? The rules, stated once (docs/report.md):

- speedup = median(baseline samples) / median(contender samples): 2.0 means the contender
  takes half the time. Samples of all repetitions are pooled; the 95% interval comes from the
  cluster bootstrap (bootstrap.py), so drift between repetitions widens it.
- p-value: two-sided Mann-Whitney U on the pooled samples (scipy), adjusted with Holm's
  step-down method over every comparison shown together, which holds the chance of any false
  "significant" among them to ALPHA.
- Noise floor f: a speedup within [1 / (1 + f), 1 + f] is never called a difference. f is
  DEFAULT_NOISE_FLOOR or, when larger, what an A/A pair (the same agent twice) measured.
- Verdict: "faster" when the adjusted p < ALPHA and the whole interval lies above 1 + f;
  "slower" when the adjusted p < ALPHA and the whole interval lies below 1 / (1 + f); otherwise
  "no clear difference". Both conditions, because with thousands of samples the test alone
  finds differences too small to matter, and the interval alone ignores how many were tried.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import mannwhitneyu

from fwbench.collector.bootstrap import FloatArray, ratio_interval

ALPHA = 0.05
DEFAULT_NOISE_FLOOR = 0.03
FASTER, SLOWER, NO_CLEAR_DIFFERENCE = "faster", "slower", "no clear difference"


@dataclass(frozen=True)
class RatioEstimate:
    speedup: float  # median(baseline) / median(contender)
    ci_low: float
    ci_high: float
    p_value: float  # unadjusted, two-sided


def estimate_speedup(
    baseline: Sequence[FloatArray], contender: Sequence[FloatArray]
) -> RatioEstimate:
    """Speedup of `contender` over `baseline`, each given as its repetitions' samples.
    Raises ValueError when either side has no samples."""
    pooled_base = np.concatenate([np.asarray(g, dtype=np.float64) for g in baseline])
    pooled_other = np.concatenate([np.asarray(g, dtype=np.float64) for g in contender])
    if not pooled_base.size or not pooled_other.size:
        raise ValueError("no samples to compare")
    low, high = ratio_interval(baseline, contender)
    if np.ptp(np.concatenate([pooled_base, pooled_other])) == 0:
        p_value = 1.0  # every value tied: U is undefined, and there is nothing to find
    else:
        p_value = float(mannwhitneyu(pooled_base, pooled_other, alternative="two-sided").pvalue)
    speedup = float(np.median(pooled_base) / np.median(pooled_other))
    return RatioEstimate(speedup, low, high, p_value)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (NaN stays NaN and does not count as a test)."""
    tested = [(p, i) for i, p in enumerate(p_values) if not math.isnan(p)]
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(sorted(tested)):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[index] = running
    return adjusted


def verdict(estimate: RatioEstimate, p_adjusted: float, floor: float) -> str:
    if not p_adjusted < ALPHA:
        return NO_CLEAR_DIFFERENCE
    if estimate.ci_low > 1 + floor:
        return FASTER
    if estimate.ci_high < 1 / (1 + floor):
        return SLOWER
    return NO_CLEAR_DIFFERENCE


def relative_difference(speedup: float) -> float:
    """How far a speedup is from 1, the same both ways: 1.05 and 1/1.05 both give 0.05."""
    return max(speedup, 1 / speedup) - 1
