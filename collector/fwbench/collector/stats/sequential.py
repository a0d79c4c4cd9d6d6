"""Deciding while measuring (`collector run --until-decided`): after every round of fresh
processes, each comparison still open is looked at again, and measuring stops for the ones
that are decided. Looking again and again at a test made for one look calls false
differences far more often than its level says; the rules here keep the error rates under
ALPHA over any number of looks:

- The unit is the process (one repetition = a fresh process of each agent), as in
  significance.py: Welch's t over the log medians of the repetitions, from 2 a side.
- Alpha spending: look k (k = 1 at 2 repetitions a side) spends ALPHA * 6 / (pi^2 k^2) of the
  error budget, which sums to ALPHA over infinitely many looks (so no maximum number of looks
  is needed in advance), split evenly (Bonferroni) over the m comparisons asked for. The
  interval at a look is the two-sided Welch interval at level 1 - alpha_k / m.
- A comparison is decided "faster" or "slower" when that interval clears the noise floor,
  "equivalent" when it lies within the margin (two one-sided tests at alpha_k / (2m) each); it
  stays open otherwise. By the union bound over looks and comparisons, the chance of any false
  difference (or any false equivalence) in the whole procedure is at most ALPHA.

The simulation in tests/collector/test_sequential.py checks the false-call rate on A/A data
with the process-to-process spread measured on the development machine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import t as student_t

from fwbench.collector.stats.bootstrap import FloatArray
from fwbench.collector.stats.significance import (
    ALPHA,
    EQUIVALENT,
    FASTER,
    SLOWER,
    UNDECIDED,
)

MIN_REPETITIONS = 2  # a side, before the first look


def look_alpha(look: int, comparisons: int = 1, alpha: float = ALPHA) -> float:
    """The error budget one comparison spends at look `look` (from 1)."""
    if look < 1 or comparisons < 1:
        raise ValueError("looks and comparisons count from 1")
    return alpha * 6 / (math.pi**2 * look**2) / comparisons


@dataclass(frozen=True)
class Look:
    """One look at one comparison: the speedup (baseline median / contender median), its
    interval at this look's level, and what it decides."""

    speedup: float
    ci_low: float
    ci_high: float
    level: float  # confidence level of the interval
    repetitions: int  # the fewer of the two sides
    verdict: str  # FASTER, SLOWER, EQUIVALENT or UNDECIDED (keep measuring)


def look(
    baseline: Sequence[FloatArray],
    contender: Sequence[FloatArray],
    look_number: int,
    comparisons: int,
    floor: float,
    margin: float,
) -> Look:
    """The verdict at this look; UNDECIDED before both sides have MIN_REPETITIONS."""
    base = np.log([np.median(g) for g in baseline if len(g)])
    other = np.log([np.median(g) for g in contender if len(g)])
    repetitions = min(len(base), len(other))
    if repetitions == 0:
        raise ValueError("no samples to compare")
    speedup = math.exp(float(base.mean() - other.mean()))
    alpha = look_alpha(look_number, comparisons)
    if repetitions < MIN_REPETITIONS:
        return Look(speedup, 0.0, math.inf, 1 - alpha, repetitions, UNDECIDED)
    low, high = _welch_interval(base, other, alpha)
    if low > math.log(1 + floor):
        called = FASTER
    elif high < -math.log(1 + floor):
        called = SLOWER
    elif -math.log(1 + max(margin, floor)) <= low and high <= math.log(1 + max(margin, floor)):
        called = EQUIVALENT
    else:
        called = UNDECIDED
    return Look(speedup, math.exp(low), math.exp(high), 1 - alpha, repetitions, called)


def _welch_interval(base: FloatArray, other: FloatArray, alpha: float) -> tuple[float, float]:
    """Two-sided Welch interval of mean(base) - mean(other) at level 1 - alpha (logs)."""
    difference = float(base.mean() - other.mean())
    var_base, var_other = base.var(ddof=1) / len(base), other.var(ddof=1) / len(other)
    spread = var_base + var_other
    if spread == 0:
        return difference, difference
    df = spread**2 / (var_base**2 / max(len(base) - 1, 1) + var_other**2 / max(len(other) - 1, 1))
    half = float(student_t.ppf(1 - alpha / 2, df)) * math.sqrt(spread)
    return difference - half, difference + half
