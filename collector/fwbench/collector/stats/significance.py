"""Is one set of step times faster than another? The rules, stated once (docs/report.md):

- speedup = median(baseline samples) / median(contender samples): 2.0 means the contender
  takes half the time. Samples of all repetitions are pooled for the point estimate.
- Interval and p-value depend on what was replicated:
  - Both sides with two or more repetitions (`--repeat`, a fresh process each by default): the
    process is the unit of replication, because two processes of one agent can differ for
    their whole life. Welch's t on the log of each repetition's median gives the 95% interval
    (around the log of the speedup) and the two-sided p-value. With few repetitions the t
    quantile widens the interval as it must: the two-level bootstrap covered the truth only
    70-86% of the time with 2-4 repetitions and 7% process-to-process spread (simulated,
    docs/report.md), Welch 95-98%.
  - Otherwise, with a prior (`prior`: how much each agent's processes differed on this host
    in earlier runs, analysis/history.py): the same t interval around the log of the speedup,
    its scale from the two priors' SDs (over the square root of each side's processes) and its
    degrees of freedom Welch-Satterthwaite's from theirs (method HISTORY). It assumes today's
    processes differ as much as the host's earlier ones did.
  - Otherwise: one process a side can only speak for those processes. The interval comes from
    the bootstrap of the samples (bootstrap.py; two levels where one side has repetitions),
    the p-value from a two-sided Mann-Whitney U on the pooled samples (classical.py).
  Either p-value is adjusted with Holm's step-down method over every comparison shown
  together, which holds the chance of any false "significant" among them to ALPHA.
- Noise floor f: a speedup within [1 / (1 + f), 1 + f] is never called a difference. f is
  DEFAULT_NOISE_FLOOR or, when larger, what an A/A pair (the same agent twice) measured.
- Evidence: a verdict must account for how much two processes of one agent differ. It does
  when both sides have two or more repetitions (measured), when this host's earlier runs
  measured it for both agents (a prior: the host's history), or when an A/A pair in the run
  measured that difference and raised the floor to it (a prior from this host, this run).
  Without any (one process a side, no history, no A/A), the verdict is "undecided", whatever
  the samples of those two processes say.
- Verdict, one of four:
  - "faster" when the adjusted p < ALPHA and the whole interval lies above 1 + f;
  - "slower" when the adjusted p < ALPHA and the whole interval lies below 1 / (1 + f);
  - "equivalent" when the whole interval lies within [1 / (1 + m), 1 + m], the equivalence
    margin m = max(margin, f) (default DEFAULT_MARGIN), **and** the two one-sided tests
    (TOST, equivalence_p) stay significant at EQUIVALENCE_ALPHA = ALPHA / 2 after Holm's
    adjustment over every comparison shown together: the chance of any false "equivalent"
    among them is at most 2.5% (alone, the rule is the 95% interval within the margin; the
    usual TOST uses the 90% one);
  - otherwise "undecided", with the repetitions a side that would likely decide it
    (needed.py).
  Both conditions for a difference, because with thousands of samples the test alone finds
  differences too small to matter, and the interval alone ignores how many were tried.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fwbench.collector.stats.bootstrap import FloatArray, ratio_interval, ratio_replicates
from fwbench.collector.stats.classical import mann_whitney_p, t_ppf, t_sf, welch_t
from fwbench.collector.stats.defaults import DEFAULT_MARGIN as DEFAULT_MARGIN
from fwbench.collector.stats.defaults import DEFAULT_NOISE_FLOOR as DEFAULT_NOISE_FLOOR
from fwbench.collector.stats.judgement import EQUIVALENT as EQUIVALENT
from fwbench.collector.stats.judgement import FASTER as FASTER
from fwbench.collector.stats.judgement import SLOWER as SLOWER
from fwbench.collector.stats.judgement import UNDECIDED as UNDECIDED
from fwbench.collector.stats.judgement import judge

ALPHA = 0.05
EQUIVALENCE_ALPHA = ALPHA / 2  # each one-sided test, family-wise after Holm
VERDICTS = (FASTER, SLOWER, EQUIVALENT, UNDECIDED)  # judgement.py's, said here for the tables


PROCESSES, HISTORY, BOOTSTRAP = "processes", "host history", "bootstrap"  # RatioEstimate.method


@dataclass(frozen=True)
class RatioEstimate:
    speedup: float  # median(baseline) / median(contender)
    ci_low: float
    ci_high: float
    p_value: float  # unadjusted, two-sided
    # BOOTSTRAP, PROCESSES (Welch's t over the repetitions' medians) or HISTORY (t with the
    # priors' spread)
    method: str = BOOTSTRAP


@dataclass(frozen=True)
class ProcessSpread:
    """A prior: how much one agent's processes differ in a cell on a host, from its earlier
    processes there (analysis/history.py). `sd`: of the log of a process's median step time,
    pooled within runs; `df`: its degrees of freedom (at most the processes less the runs,
    fewer where runs differ in spread)."""

    sd: float
    df: float
    processes: int = 0
    runs: int = 0


Prior = tuple[ProcessSpread, ProcessSpread]  # (baseline's, contender's)


def estimate_speedup(
    baseline: Sequence[FloatArray], contender: Sequence[FloatArray], prior: Prior | None = None
) -> RatioEstimate:
    """Speedup of `contender` over `baseline`, each given as its repetitions' samples; the
    prior is used only where a side has one repetition. Raises ValueError when either side
    has no samples."""
    baseline, contender = _nonempty(baseline), _nonempty(contender)
    pooled_base, pooled_other = np.concatenate(baseline), np.concatenate(contender)
    speedup = float(np.median(pooled_base) / np.median(pooled_other))
    if len(baseline) >= 2 and len(contender) >= 2:
        low, high, p_value = _between_processes(baseline, contender, speedup)
        return RatioEstimate(speedup, low, high, p_value, PROCESSES)
    if prior is not None:
        scale, df = prior_scale(len(baseline), len(contender), prior)
        half = t_ppf(1 - ALPHA / 2, df) * scale
        centre = math.log(speedup)
        p_value = 2 * t_sf(abs(centre) / scale, df)
        return RatioEstimate(
            speedup, math.exp(centre - half), math.exp(centre + half), p_value, HISTORY
        )
    low, high = ratio_interval(baseline, contender)
    if np.ptp(np.concatenate([pooled_base, pooled_other])) == 0:
        p_value = 1.0  # every value tied: U is undefined, and there is nothing to find
    else:
        p_value = mann_whitney_p(pooled_base, pooled_other)
    return RatioEstimate(speedup, low, high, p_value)


def _between_processes(
    baseline: Sequence[FloatArray], contender: Sequence[FloatArray], speedup: float
) -> tuple[float, float, float]:
    """Welch's t on log(repetition medians): (interval low, high, p), the interval's
    half-width from Welch's, centred on log(speedup)."""
    base = np.log([np.median(g) for g in baseline])
    other = np.log([np.median(g) for g in contender])
    if base.var(ddof=1) + other.var(ddof=1) == 0:  # every repetition's median identical
        return speedup, speedup, 1.0 if base.mean() == other.mean() else 0.0
    test = welch_t(base, other)
    low, high = test.interval(1 - ALPHA)
    half = (high - low) / 2
    centre = math.log(speedup)
    return math.exp(centre - half), math.exp(centre + half), test.p_value


def _nonempty(groups: Sequence[FloatArray]) -> list[FloatArray]:
    """The groups that have samples, as float arrays; ValueError when none has."""
    found = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    if not found:
        raise ValueError("no samples to compare")
    return found


def welch_scale(base: FloatArray, other: FloatArray) -> tuple[float, float]:
    """Welch's standard error of mean(base) - mean(other) and its degrees of freedom (0, nan
    when every value of both sides is the same)."""
    var_base, var_other = base.var(ddof=1) / len(base), other.var(ddof=1) / len(other)
    spread = var_base + var_other
    if spread == 0:
        return 0.0, math.nan
    df = spread**2 / (var_base**2 / max(len(base) - 1, 1) + var_other**2 / max(len(other) - 1, 1))
    return math.sqrt(spread), df


def prior_scale(
    baseline_processes: int, contender_processes: int, prior: Prior
) -> tuple[float, float]:
    """The standard error of the log speedup of processes whose spread the priors give, and
    its Welch-Satterthwaite degrees of freedom. ValueError for a prior without spread."""
    base, other = prior
    if min(base.sd, other.sd) <= 0 or min(base.df, other.df) < 1:
        raise ValueError(f"a prior needs a spread above 0 and 1 degree of freedom: {prior}")
    var_base, var_other = base.sd**2 / baseline_processes, other.sd**2 / contender_processes
    df = (var_base + var_other) ** 2 / (var_base**2 / base.df + var_other**2 / other.df)
    return math.sqrt(var_base + var_other), df


def equivalence_p(
    baseline: Sequence[FloatArray],
    contender: Sequence[FloatArray],
    bound: float,
    prior: Prior | None = None,
) -> float:
    """The TOST p-value (the larger of the two one-sided ones) that the speedup lies within
    [1 / bound, bound], by the method estimate_speedup's interval uses: Welch's t on the
    repetitions' log medians, centred on the log of the pooled speedup, with two or more
    repetitions a side; else with a prior, t with the priors' scale; else the bootstrap
    replicates' share beyond each bound."""
    baseline, contender = _nonempty(baseline), _nonempty(contender)
    edge = math.log(bound)
    centre = math.log(np.median(np.concatenate(baseline)) / np.median(np.concatenate(contender)))
    if len(baseline) < 2 or len(contender) < 2:
        if prior is not None:
            return _tost(centre, edge, *prior_scale(len(baseline), len(contender), prior))
        logs = np.log(ratio_replicates(baseline, contender))
        return float(max(np.mean(logs <= -edge), np.mean(logs >= edge)))
    base = np.log([np.median(g) for g in baseline])
    other = np.log([np.median(g) for g in contender])
    return _tost(centre, edge, *welch_scale(base, other))


def _tost(centre: float, edge: float, scale: float, df: float) -> float:
    if scale == 0:
        return 0.0 if abs(centre) < edge else 1.0
    above_low = t_sf((centre + edge) / scale, df)  # H0: speedup <= 1 / bound
    below_high = t_sf(-(centre - edge) / scale, df)  # H0: speedup >= bound
    return max(above_low, below_high)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (NaN stays NaN and does not count as a test)."""
    tested = [(p, i) for i, p in enumerate(p_values) if not math.isnan(p)]
    adjusted = [math.nan] * len(p_values)
    running = 0.0
    for rank, (p, index) in enumerate(sorted(tested)):
        running = max(running, min(1.0, (len(tested) - rank) * p))
        adjusted[index] = running
    return adjusted


def verdict(
    estimate: RatioEstimate,
    p_adjusted: float,
    floor: float,
    margin: float = DEFAULT_MARGIN,
    accounted: bool = True,
    p_equivalent_adjusted: float = 0.0,
) -> str:
    """The verdict of the module's rules; `accounted` says whether process-to-process
    variation is accounted for (repetitions on both sides, or an A/A floor);
    `p_equivalent_adjusted`: equivalence_p, Holm-adjusted over the comparisons shown
    together (the default, 0, is one comparison whose 95% interval decides alone)."""
    if not accounted:
        return UNDECIDED
    return judge(
        estimate.ci_low,
        estimate.ci_high,
        floor,
        margin,
        may_differ=p_adjusted < ALPHA,
        may_be_same=p_equivalent_adjusted < EQUIVALENCE_ALPHA,
    )


def relative_difference(speedup: float) -> float:
    """How far a speedup is from 1, the same both ways: 1.05 and 1/1.05 both give 0.05."""
    return max(speedup, 1 / speedup) - 1
