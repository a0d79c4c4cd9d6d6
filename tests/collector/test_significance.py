"""Tests for fwbench.collector.stats.significance and bootstrap: the verdict rules on synthetic
samples whose truth is known."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from fwbench.collector.stats.bootstrap import (
    median_interval,
    resampled_medians,
)
from fwbench.collector.stats.needed import MOST_SUGGESTED, repetitions_needed, would_decide
from fwbench.collector.stats.significance import (
    EQUIVALENT,
    FASTER,
    SLOWER,
    UNDECIDED,
    RatioEstimate,
    estimate_speedup,
    holm,
    relative_difference,
    verdict,
)


def lognormal(median: float, spread: float, n: int, seed: int) -> np.ndarray:
    return median * np.random.default_rng(seed).lognormal(0.0, spread, n)


def judged(baseline: list[np.ndarray], contender: list[np.ndarray], floor: float = 0.03) -> tuple:
    estimate = estimate_speedup(baseline, contender)
    return estimate, verdict(estimate, estimate.p_value, floor)


# --- bootstrap --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 8, 31])
def test_resampled_medians_match_brute_force_bootstrap(n: int) -> None:
    # The order-statistic shortcut must give the distribution that resampling gives.
    values = np.sort(lognormal(1.0, 0.3, n, seed=n))
    fast = resampled_medians([values], resamples=100_000)
    draws = np.random.default_rng(99).integers(0, n, size=(100_000, n))
    brute = np.median(values[draws], axis=1)
    assert fast.mean() == pytest.approx(brute.mean(), rel=2e-3)
    assert fast.std() == pytest.approx(brute.std(), rel=0.03, abs=1e-9)
    for value in np.unique(brute)[:5]:
        assert np.mean(fast <= value) == pytest.approx(np.mean(brute <= value), abs=0.01)


def test_resampled_medians_clustered_match_brute_force() -> None:
    groups = [np.array([1.0, 2.0, 3.0]), np.array([10.0, 11.0]), np.array([5.0])]
    fast = resampled_medians(groups, resamples=20_000)
    rng = np.random.default_rng(7)
    brute = []
    for _ in range(20_000):
        chosen = [groups[i] for i in rng.integers(0, 3, 3)]
        brute.append(
            np.median(np.concatenate([g[rng.integers(0, g.size, g.size)] for g in chosen]))
        )
    for q in (5, 25, 50, 75, 95):
        assert np.percentile(fast, q) == pytest.approx(np.percentile(brute, q), abs=0.51)
    assert fast.mean() == pytest.approx(np.mean(brute), rel=0.02)


def test_median_interval_is_deterministic_and_covers_median() -> None:
    values = lognormal(0.01, 0.1, 500, seed=1)
    first = median_interval([values])
    assert median_interval([values]) == first
    assert first[0] < np.median(values) < first[1]


def test_median_interval_widens_with_drift_between_repetitions() -> None:
    # Same pooled values; split into repetitions that drifted apart, the cluster bootstrap
    # must report more uncertainty than one big sample does.
    reps = [lognormal(0.010 * shift, 0.02, 300, seed=i) for i, shift in enumerate((1, 1.1, 1.2))]
    pooled = np.concatenate(reps)
    single_low, single_high = median_interval([pooled])
    low, high = median_interval(reps)
    assert (high - low) > 3 * (single_high - single_low)


def test_resampled_medians_without_samples_raise() -> None:
    with pytest.raises(ValueError):
        resampled_medians([np.array([])])


# --- verdicts ---------------------------------------------------------------------------------


def test_identical_distributions_are_equivalent() -> None:
    base = [lognormal(0.010, 0.05, 400, seed=s) for s in (1, 2, 3)]
    other = [lognormal(0.010, 0.05, 400, seed=s) for s in (4, 5, 6)]
    estimate, result = judged(base, other)
    assert result == EQUIVALENT
    assert estimate.ci_low < 1 < estimate.ci_high
    assert estimate.speedup == pytest.approx(1.0, abs=0.02)


def test_twice_as_fast_is_faster_with_small_p() -> None:
    base = [lognormal(0.020, 0.05, 200, seed=s) for s in (1, 2, 3)]
    other = [lognormal(0.010, 0.05, 200, seed=s) for s in (4, 5, 6)]
    estimate, result = judged(base, other)
    assert result == FASTER and estimate.method == "processes"
    assert estimate.p_value < 1e-4  # Welch's t over 3 + 3 repetition medians
    assert estimate.speedup == pytest.approx(2.0, rel=0.03)
    assert estimate.ci_low > 1.8 and estimate.ci_high < 2.2


def test_twice_as_slow_is_slower() -> None:
    base = [lognormal(0.010, 0.05, 200, seed=1)]
    other = [lognormal(0.020, 0.05, 200, seed=2)]
    estimate, result = judged(base, other)
    assert result == SLOWER
    assert estimate.speedup == pytest.approx(0.5, rel=0.03)


def test_shift_smaller_than_noise_floor_is_not_a_difference() -> None:
    # 1.5% faster, very precisely measured: the test finds it, the floor (3%) refuses it.
    base = [lognormal(0.010 * 1.015, 0.01, 3000, seed=1)]
    other = [lognormal(0.010, 0.01, 3000, seed=2)]
    estimate, result = judged(base, other, floor=0.03)
    assert estimate.p_value < 1e-6
    assert 1.0 < estimate.ci_low < 1.03
    assert result == EQUIVALENT  # within the 5% margin: equal for the question asked
    # The same data with a floor under the shift is a win.
    assert verdict(estimate, estimate.p_value, floor=0.005) == FASTER


def test_large_but_insignificant_difference_is_undecided() -> None:
    estimate = RatioEstimate(speedup=1.5, ci_low=1.2, ci_high=1.8, p_value=0.2)
    assert verdict(estimate, 0.2, floor=0.03) == UNDECIDED


def test_interval_reaching_into_floor_is_undecided() -> None:
    estimate = RatioEstimate(speedup=1.2, ci_low=1.02, ci_high=1.4, p_value=1e-9)
    assert verdict(estimate, 1e-9, floor=0.03) == UNDECIDED


def test_equivalence_needs_the_whole_interval_inside_the_margin() -> None:
    inside = RatioEstimate(speedup=1.01, ci_low=0.97, ci_high=1.04, p_value=0.5)
    assert verdict(inside, 0.5, floor=0.03, margin=0.05) == EQUIVALENT
    assert verdict(inside, 0.5, floor=0.03, margin=0.02) == UNDECIDED  # 4% > 3% floor, 2%
    assert verdict(inside, 0.5, floor=0.05, margin=0.02) == EQUIVALENT  # the floor widens it
    wide = RatioEstimate(speedup=1.0, ci_low=0.9, ci_high=1.11, p_value=1.0)
    assert verdict(wide, 1.0, floor=0.03) == UNDECIDED  # "no difference found" is not "equal"


def test_no_verdict_without_process_to_process_variation_accounted_for() -> None:
    clear = RatioEstimate(speedup=2.0, ci_low=1.9, ci_high=2.1, p_value=1e-9)
    assert verdict(clear, 1e-9, floor=0.03, accounted=False) == UNDECIDED
    same = RatioEstimate(speedup=1.0, ci_low=0.99, ci_high=1.01, p_value=1.0)
    assert verdict(same, 1.0, floor=0.03, accounted=False) == UNDECIDED


def test_repetitions_needed_shrink_the_interval_to_a_verdict() -> None:
    # 1.30x [1.00, 1.69] from 3 a side: half-width log(1.3); to clear a 3% floor the
    # half-width must fall under log(1.3) - log(1.03), (0.262 / 0.233)^2 * 3 -> 4.
    wide = RatioEstimate(speedup=1.3, ci_low=1.3 / 1.3, ci_high=1.3 * 1.3, p_value=0.1)
    assert repetitions_needed(wide, 3, floor=0.03) == 4
    # Near 1, the margin is the nearer target: 1.01x [0.9, 1.13] from 2 a side.
    near = RatioEstimate(speedup=1.01, ci_low=0.9, ci_high=1.13, p_value=0.8)
    needed = repetitions_needed(near, 2, floor=0.03, margin=0.05)
    assert needed is not None and 10 < needed < 60
    # On the floor's edge no number is likely to decide it.
    edge = RatioEstimate(speedup=1.03, ci_low=0.95, ci_high=1.12, p_value=0.5)
    assert repetitions_needed(edge, 3, floor=0.03, margin=0.03) is None


def test_a_need_beyond_any_run_is_said_as_such_not_as_a_number() -> None:
    # 1.036x [0.85, 1.26] after 5 processes a side at a sequential look's strict level: past
    # the floor by 0.6%, inside the margin by 1.3%, its interval +-16%: hundreds a side.
    near = RatioEstimate(1.036, 0.85, 1.26, math.nan)
    needed = repetitions_needed(near, 5, floor=0.03, margin=0.05, level=0.9995)
    assert needed is not None and needed > MOST_SUGGESTED
    said = would_decide(needed)
    assert str(needed) not in said and said.startswith(f"more than {MOST_SUGGESTED} processes")
    assert "--quiet-host" in said
    assert would_decide(MOST_SUGGESTED, "repetitions", "them") == (
        f"about {MOST_SUGGESTED} repetitions a side would likely decide them"
    )
    assert would_decide(None).startswith("at the edge of the floor or margin")


def test_repetitions_needed_count_the_degrees_of_freedom_more_processes_bring() -> None:
    # A Welch interval's half-width is t(q, 2 (n - 1)) x SE0 x sqrt(n0 / n): from 3 a side at
    # a strict level the t quantile alone shrinks severalfold, so the square root only would
    # overstate the processes needed (here by more than five times).
    level, n0 = 1 - 3e-4, 3
    near = RatioEstimate(speedup=1.01, ci_low=0.8, ci_high=1.27, p_value=0.8)
    plain = repetitions_needed(near, n0, floor=0.03, margin=0.05)
    counted = repetitions_needed(near, n0, floor=0.03, margin=0.05, level=level)
    assert plain is not None and counted is not None and counted * 5 < plain
    q = 1 - (1 - level) / 2
    se0 = math.log(1.27 / 0.8) / 2 / student_t.ppf(q, 2 * (n0 - 1))

    def half(n: int) -> float:
        return student_t.ppf(q, 2 * (n - 1)) * se0 * math.sqrt(n0 / n)

    target = math.log(1.05) - math.log(1.01)  # the margin is the nearer target
    assert half(counted) <= target < half(counted - 1)  # the fewest that fit
    # At the usual 95% and many processes it agrees with the square root alone (about).
    wide = RatioEstimate(speedup=1.3, ci_low=1.3 / 1.1, ci_high=1.3 * 1.1, p_value=0.01)
    plain, counted = (repetitions_needed(wide, 30, 0.2, 0.05, lv) for lv in (None, 0.95))
    assert plain is not None and counted is not None and abs(counted - plain) <= 2


def process_runs(effects: list[float], seed: int, n: int = 60) -> list[np.ndarray]:
    """One array of step times per process; each process is `effect` times slower for life."""
    return [lognormal(0.040 * effect, 0.05, n, seed=seed + i) for i, effect in enumerate(effects)]


def test_processes_that_differ_for_life_are_noise_not_a_difference() -> None:
    # The same agent, three processes a side; one side happened to draw slower processes.
    base = process_runs([1.00, 1.10, 0.97], seed=10)
    other = process_runs([1.08, 1.12, 1.05], seed=20)
    estimate, result = judged(base, other)
    assert estimate.method == "processes"
    assert estimate.ci_low < 1 < estimate.ci_high
    assert result == UNDECIDED
    # Treating each side as one process (all samples pooled) would have called it.
    pooled, called = judged([np.concatenate(base)], [np.concatenate(other)])
    assert pooled.method == "bootstrap" and called == SLOWER


def test_aa_false_calls_stay_rare_with_process_to_process_spread() -> None:
    # 300 seeded A/A comparisons, 3 processes a side, each process off by a lognormal 7% for
    # its whole life (more than measured on the development VM): the verdict rules hold the
    # false "faster"/"slower" calls under ALPHA (2 of 300; the two-level bootstrap with
    # Mann-Whitney called 18).
    rng = np.random.default_rng(7)
    calls = 0
    for trial in range(300):
        sides = [process_runs(list(rng.lognormal(0, 0.07, 3)), seed=trial * 10 + k) for k in (0, 5)]
        calls += judged(*sides)[1] in (FASTER, SLOWER)
    assert calls / 300 < 0.05


def test_a_real_difference_beyond_the_margin_is_rarely_called_equivalent() -> None:
    # 300 seeded comparisons of a true 8% difference, with the spread above: equivalence
    # within 5% must stay rarer than ALPHA / 2 (the test's nominal level per side).
    rng = np.random.default_rng(11)
    equivalent = 0
    for trial in range(300):
        base = process_runs(list(1.08 * rng.lognormal(0, 0.07, 3)), seed=trial * 10)
        other = process_runs(list(rng.lognormal(0, 0.07, 3)), seed=trial * 10 + 5)
        equivalent += judged(base, other)[1] == EQUIVALENT
    assert equivalent / 300 < 0.025


def test_identical_repetition_medians_compare_without_error() -> None:
    same = [np.full(20, 0.01), np.full(20, 0.01)]
    estimate, result = judged(same, same)
    assert estimate.method == "processes" and estimate.p_value == 1.0
    assert estimate.ci_low == estimate.ci_high == 1.0 and result == EQUIVALENT
    faster, called = judged(same, [np.full(20, 0.005), np.full(20, 0.005)])
    assert faster.speedup == 2.0 and faster.p_value == 0.0 and called == FASTER


def test_constant_samples_compare_without_error() -> None:
    same = [np.full(20, 0.01)]
    estimate, result = judged(same, same)
    assert estimate.p_value == 1.0 and estimate.speedup == 1.0
    assert result == EQUIVALENT


def test_holm_known_values() -> None:
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    # Sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone.
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_keeps_nan_and_caps_at_one() -> None:
    adjusted = holm([0.5, math.nan, 0.6])
    assert math.isnan(adjusted[1])
    assert adjusted[0] == 1.0 and adjusted[2] == 1.0


def test_relative_difference_is_symmetric() -> None:
    assert relative_difference(1.05) == pytest.approx(0.05)
    assert relative_difference(1 / 1.05) == pytest.approx(0.05)


def test_median_interval_agrees_with_scipy_bootstrap() -> None:
    """scipy.stats.bootstrap is the oracle; the project's vectorised bootstrap is kept because
    it is much faster on the sample counts a run produces (test_bootstrap_of_many_samples)."""
    from scipy.stats import bootstrap

    rng = np.random.default_rng(7)
    values = rng.lognormal(0.0, 0.2, size=400)
    low, high = median_interval([values])
    oracle = bootstrap(
        (values,), np.median, n_resamples=20_000, method="percentile", random_state=rng
    ).confidence_interval
    width = oracle.high - oracle.low
    assert abs(low - oracle.low) < 0.15 * width and abs(high - oracle.high) < 0.15 * width


def test_welch_interval_is_scipys_welch_around_the_speedup() -> None:
    from scipy.stats import ttest_ind

    rng = np.random.default_rng(3)
    base = [rng.normal(10.0 + d, 0.3, 50) for d in (0.0, 0.4, -0.2)]
    other = [rng.normal(8.0 + d, 0.3, 50) for d in (0.1, -0.3, 0.2, 0.0)]
    estimate = estimate_speedup(base, other)
    assert estimate.method == "processes"
    oracle = ttest_ind(
        np.log([np.median(g) for g in base]),
        np.log([np.median(g) for g in other]),
        equal_var=False,
    )
    assert estimate.p_value == pytest.approx(oracle.pvalue)
    ci = oracle.confidence_interval(0.95)
    half = (ci.high - ci.low) / 2
    assert math.log(estimate.ci_high) - math.log(estimate.speedup) == pytest.approx(half)
