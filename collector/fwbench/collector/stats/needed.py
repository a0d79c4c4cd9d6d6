"""How many repetitions (processes) a side would likely decide a comparison left open, and how
that is said: the one sentence the run (run/decide.py), its answers (analysis/answers) and
`collector compare` (analysis/comparison.py) print.

An estimate is a plan only while it is a run someone would make: beyond MOST_SUGGESTED a side,
the sides are too close to the floor for how much their processes differ on this host, and no
rerun of that size is likely; the sentence says so, and what would change it, instead of a
number of processes (a run of ~6,000 processes a side was once suggested, with --budget 73h)."""

from __future__ import annotations

import math

from fwbench.collector.stats.classical import t_ppf
from fwbench.collector.stats.significance import DEFAULT_MARGIN, RatioEstimate

# The most repetitions a side a sentence suggests: 100 rounds of a minute each is most of a
# day's machine for one comparison.
MOST_SUGGESTED = 100


def repetitions_needed(
    estimate: RatioEstimate,
    repetitions: int,
    floor: float,
    margin: float = DEFAULT_MARGIN,
    level: float | None = None,
) -> int | None:
    """About how many repetitions a side would likely settle an undecided comparison measured
    with `repetitions` a side, if the speedup stays where it is: the interval narrows as one
    over the square root of the repetitions, until it clears the floor (a difference) or fits
    the margin (equivalence), whichever needs fewer. None when the estimate sits on the
    boundary (no number of repetitions is likely to decide it).

    `level`: the confidence level of a Welch interval over the repetitions (process medians).
    Its t quantile also shrinks as repetitions add degrees of freedom (about 2 (n - 1) for n
    a side), which matters most where it is largest: few processes at a strict level (at 3 a
    side and level 1 - 3e-4 the quantile is 2.6 times the large-sample one). Without it
    (bootstrap intervals) only the square root is applied, which overstates the need there."""
    if estimate.ci_low <= 0 or repetitions < 1:
        return None
    half = (math.log(estimate.ci_high) - math.log(estimate.ci_low)) / 2
    distance = abs(math.log(estimate.speedup))
    targets = [
        room
        for room in (
            distance - math.log(1 + floor),  # the interval must clear the floor
            math.log(1 + max(margin, floor)) - distance,  # or fit inside the margin
        )
        if room > 0.005  # closer than half a percent to the boundary: not worth stating
    ]
    if not targets or half <= 0:
        return None
    target = max(targets)
    if level is None or repetitions < 2:
        return max(repetitions + 1, math.ceil(repetitions * (half / target) ** 2))
    quantile = 1 - (1 - level) / 2
    standard_error = half / t_ppf(quantile, 2 * (repetitions - 1))

    def half_at(n: int) -> float:
        return t_ppf(quantile, 2 * (n - 1)) * standard_error * math.sqrt(repetitions / n)

    low, high = repetitions, repetitions + 1  # half_at(low) > target throughout
    while half_at(high) > target:
        low, high = high, high * 2
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if half_at(middle) > target else (low, middle)
    return high


def would_decide(needed: int | None, unit: str = "processes", it: str = "it") -> str:
    """What would likely decide an open comparison (`it`), given `repetitions_needed`'s figure:
    about so many `unit` a side, or why no number of them is likely to."""
    if needed is None:
        return f"at the edge of the floor or margin: more {unit} may not decide {it}"
    if needed > MOST_SUGGESTED:
        return f"more than {MOST_SUGGESTED} {unit} a side would be needed to decide " + too_many(it)
    return f"about {needed} {unit} a side would likely decide {it}"


def too_many(it: str) -> str:
    """The rest of the sentence for comparisons (`it`) beyond MOST_SUGGESTED a side."""
    return (
        f"{it}: too many to run, the difference being small for how much processes differ on "
        f"this host: measure {it} where they differ less (a quieter host, --quiet-host)"
    )
