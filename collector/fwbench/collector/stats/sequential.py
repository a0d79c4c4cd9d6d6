"""Deciding while measuring (`collector run --until-decided`): after every round of fresh
processes, each comparison still open is looked at again, and measuring stops for the ones
that are decided. Looking again and again at a test made for one look calls false
differences far more often than its level says; the rules here keep the error rates under
ALPHA over all the looks a run can make:

- The unit is the process (one repetition = a fresh process of each agent), as in
  significance.py: the log medians of the repetitions, from 2 a side, compared by Yuen's t on
  20%-trimmed means (Welch's t below 5 a side, where nothing is trimmed): on the shared
  2-vCPU hosts a burst of interference can slow one process's cell 1.5x as a whole, and one
  such process among nine made Welch's interval three times as wide (docs/report.md).
- Alpha spending over the planned looks and the time budget, whichever runs out first: a run
  of at most R rounds looks at a comparison at most K = R - 1 times (from its second round).
  After its look k a comparison has spent the fraction f_k = min(1, max(k / K, t_k / T))^3
  of each error budget, t_k being the seconds since the first round ended and T what the
  budget left then; look k spends ALPHA x (f_k - f_(k-1)). The fractions only grow and end at
  1 at most, so the spending sums to ALPHA or less however the run stops (Bonferroni over the
  looks). The progress max(k / K, t_k / T) is the rounds' share (K = 99 with --repeat 100)
  or, when the budget fits fewer rounds than --repeat allows (10 minutes of 60 s rounds: 9
  looks), the time's, so the error budget is spent on the looks that happen. The cube
  (SPENDING_POWER; Kim and DeMets' power family, close to O'Brien-Fleming's) keeps the early
  looks, at two or three processes a side where little can be decided, from spending the
  budget that the late ones, at many processes, need. Simulating issue 13's done-when command
  (tests/benchmarks/spending_schedule.py; docs/report.md, "Spending the budget late"), every
  comparison was decided in 49% of the runs instead of 32% (equal shares, until 2026-11-27)
  and its A/A pair whose processes lie about 6% apart was called equivalent in 78% instead
  of 60%, under one of three noise models (all three gained); the easiest pairs take one or
  two more processes in short runs of rounds only. A round's duration hardly
  depends on which side was faster (process start-up and fixed measuring times dominate);
  the simulation in tests/collector/test_sequential.py makes durations follow the data and
  the rates hold. (The first schedule, 6 / (pi^2 k^2) per look, spent 61% of the budget at
  two processes a side, where nothing is decided.)
- Two families, each with its own budget and its own Holm-style recycling: a *difference*
  ("faster" or "slower": the two-sided interval at level 1 - a clears the noise floor)
  and an *equivalence* (two one-sided tests at level a each, i.e. the 1 - 2a interval lies
  within the margin). At a look, a = ALPHA x (f_k - f_(k-1)) / m, m being the comparisons
  asked for less those already decided *in that family* (a hypothesis rejected gives its
  share to the others, as in Holm's procedure; one merely stopped keeps its share). Before
  the first false call of a family every true hypothesis of it is still counted, so by the
  union bound over looks the chance of any false difference is at most ALPHA, and so is the
  chance of any false equivalence.

The simulation in tests/collector/test_sequential.py checks the false-call rates on A/A data
with the process-to-process spread measured on the development machine."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fwbench.collector.stats.bootstrap import FloatArray
from fwbench.collector.stats.classical import t_ppf
from fwbench.collector.stats.defaults import MAX_HISTORY_MARGIN as MAX_HISTORY_MARGIN
from fwbench.collector.stats.judgement import judge
from fwbench.collector.stats.significance import (
    ALPHA,
    EQUIVALENT,
    UNDECIDED,
)

MIN_REPETITIONS = 2  # a side, before the first look
SPENDING_POWER = 3  # f_k = progress^3: little spent early, most where the processes are many
# What a margin given with --margin records as its source (the widest taken from a host's
# history without it, MAX_HISTORY_MARGIN, is in stats/defaults.py).
MARGIN_GIVEN = "--margin"
WIDEST = 1e6  # the widest speedup interval a look reports: [1e-6, 1e6]
METHOD = (
    "Yuen's trimmed t over fresh processes; alpha spent over the looks as the cube of the "
    "progress by rounds or by time, whichever runs out first, Holm-style over the "
    "comparisons, separately for differences and for equivalence (TOST) (stats/sequential.py)"
)


def spent_fraction(
    looks: int, planned_looks: int, elapsed: float = 0.0, time: float = 0.0
) -> float:
    """The fraction of each error budget a comparison has spent after its look `looks` (from
    1) of `planned_looks`: the progress, the larger of the looks' share and the time's,
    `elapsed` seconds of `time` (since the first round ended; 0: rounds only), at most 1, to
    the power SPENDING_POWER."""
    if not 1 <= looks <= planned_looks:
        raise ValueError(
            f"look {looks} of {planned_looks}: looks count from 1 up to the planned looks"
        )
    by_time = elapsed / time if time > 0 else 0.0
    return min(1.0, max(looks / planned_looks, by_time)) ** SPENDING_POWER


def alpha_between(
    spent_before: float, spent_now: float, comparisons: int = 1, alpha: float = ALPHA
) -> float:
    """The error budget one comparison spends at a look that takes its spent fraction
    (spent_fraction) from `spent_before` to `spent_now`, `comparisons` being those still
    sharing the family's budget."""
    if not 0 <= spent_before < spent_now <= 1 or comparisons < 1:
        raise ValueError(
            f"spent {spent_before} -> {spent_now} with {comparisons} comparisons: a look "
            "spends a growing fraction within [0, 1], shared by 1 or more comparisons"
        )
    return alpha * (spent_now - spent_before) / comparisons


def look_alpha(look: int, planned_looks: int, comparisons: int = 1, alpha: float = ALPHA) -> float:
    """Look `look`'s budget when only rounds count (the progress look / planned_looks)."""
    now = spent_fraction(look, planned_looks)
    before = spent_fraction(look - 1, planned_looks) if look > 1 else 0.0
    return alpha_between(before, now, comparisons, alpha)


@dataclass(frozen=True)
class Look:
    """One look at one comparison: the speedup (baseline median / contender median), its
    interval at this look's level (the equivalence interval when it decided equivalent, else
    the difference interval), and what it decides."""

    speedup: float
    ci_low: float
    ci_high: float
    level: float  # confidence level of the interval
    repetitions: int  # the fewer of the two sides
    verdict: str  # FASTER, SLOWER, EQUIVALENT or UNDECIDED (keep measuring)
    # How far apart the processes of one side measured: the larger side's SD of the log
    # medians (NaN below 2 a side). What sets the interval's width, so what an undecided
    # comparison's `why` names.
    spread: float = math.nan


def look(
    baseline: Sequence[FloatArray],
    contender: Sequence[FloatArray],
    alpha_difference: float,
    alpha_equivalence: float,
    floor: float,
    margin: float,
) -> Look:
    """The verdict at this look; UNDECIDED before both sides have MIN_REPETITIONS.
    `alpha_difference` / `alpha_equivalence`: this look's error budget in each family
    (look_alpha)."""
    return look_at_medians(
        [float(np.median(g)) for g in baseline if len(g)],
        [float(np.median(g)) for g in contender if len(g)],
        alpha_difference,
        alpha_equivalence,
        floor,
        margin,
    )


def look_at_medians(
    baseline: Sequence[float],
    contender: Sequence[float],
    alpha_difference: float,
    alpha_equivalence: float,
    floor: float,
    margin: float,
) -> Look:
    """look() on each side's per-process medians (seconds), all it reads of the samples."""
    base = np.log(np.asarray(baseline, dtype=float))
    other = np.log(np.asarray(contender, dtype=float))
    repetitions = min(len(base), len(other))
    if repetitions == 0:
        raise ValueError("no samples to compare")
    scaled = trimmed_scale(base, other)  # the statistic, once for the look's two intervals
    speedup = math.exp(scaled[0])
    spread = process_spread(base, other)
    if repetitions < MIN_REPETITIONS:
        return Look(speedup, 0.0, math.inf, 1 - alpha_difference, repetitions, UNDECIDED)
    # Two processes a side at a strict level can give a t quantile in the thousands (Welch's
    # df near 1): the bounds are kept within [1 / WIDEST, WIDEST], as good as unbounded, so
    # that exp() cannot overflow and the record stays finite.
    low, high = _bounded(*_interval(scaled, alpha_difference))
    level = 1 - alpha_difference
    # Two one-sided tests at alpha_equivalence each: the 1 - 2 alpha interval within the
    # margin; that interval is the one shown when it decides (judgement.py judges both).
    near_low, near_high = _bounded(*_interval(scaled, 2 * alpha_equivalence))
    near = (math.exp(near_low), math.exp(near_high))
    called = judge(math.exp(low), math.exp(high), floor, margin, near=near)
    if called == EQUIVALENT:
        level, low, high = 1 - 2 * alpha_equivalence, near_low, near_high
    return Look(speedup, math.exp(low), math.exp(high), level, repetitions, called, spread)


def _bounded(low: float, high: float) -> tuple[float, float]:
    """A log interval within [-log WIDEST, log WIDEST]."""
    return max(low, -math.log(WIDEST)), min(high, math.log(WIDEST))


def process_spread(*sides: FloatArray) -> float:
    """The largest SD (ddof 1) of the log per-process medians among `sides` with 2 or more
    processes; NaN when none has."""
    spreads = [float(np.std(side, ddof=1)) for side in sides if len(side) >= MIN_REPETITIONS]
    return max(spreads) if spreads else math.nan


TRIM = 0.2  # the share of processes trimmed at each end of a side (Yuen's test)


def trimmed_scale(base: FloatArray, other: FloatArray) -> tuple[float, float, float]:
    """Yuen's two-sample statistic on 20%-trimmed means: (difference of the trimmed means,
    its standard error, degrees of freedom). Each side drops floor(0.2 n) values at each end
    and takes its variance winsorized; below 5 values a side nothing is dropped and this is
    Welch's. A process that a burst of interference slowed as a whole (1.5x for one cell, seen
    on the shared 2-vCPU hosts, docs/report.md) then widens the interval as much as any other
    process rather than dominating its variance."""
    means, parts, kept = [], [], []
    for side in (np.sort(base), np.sort(other)):
        n = len(side)
        g = int(TRIM * n)
        h = n - 2 * g
        middle = side[g : n - g]
        winsorized = np.concatenate([np.full(g, middle[0]), middle, np.full(g, middle[-1])])
        means.append(float(middle.mean()))
        parts.append((n - 1) * float(winsorized.var(ddof=1)) / (h * (h - 1)) if h > 1 else 0.0)
        kept.append(h)
    spread = parts[0] + parts[1]
    difference = means[0] - means[1]
    if min(kept) < 2:  # one process a side: a difference, no scale
        return difference, math.nan, math.nan
    if spread == 0:
        return difference, 0.0, math.nan
    df = spread**2 / (parts[0] ** 2 / (kept[0] - 1) + parts[1] ** 2 / (kept[1] - 1))
    return difference, math.sqrt(spread), df


def _interval(scaled: tuple[float, float, float], alpha: float) -> tuple[float, float]:
    """Two-sided interval of the trimmed-mean difference of the logs at level 1 - alpha, from
    trimmed_scale's statistic (Yuen's; Welch's below 5 processes a side)."""
    difference, scale, df = scaled
    if scale == 0:
        return difference, difference
    half = t_ppf(1 - alpha / 2, df) * scale
    return difference - half, difference + half
