"""Tests for fwbench.collector.stats.samples: statistics of raw samples and derived throughput."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fwbench.collector.stats.samples import (
    STAT_NAMES,
    is_noisy,
    sample_stats,
    throughput,
    tukey_outliers,
)

STAT_KEYS = set(STAT_NAMES)
FLOAT_KEYS = STAT_KEYS - {"n", "outliers", "noisy"}


@pytest.fixture
def samples() -> list[int]:
    """Eleven step times in nanoseconds, 1 ms to 3 ms, one outlier."""
    return [
        1_000_000,
        1_200_000,
        1_100_000,
        1_050_000,
        3_000_000,
        1_150_000,
        1_020_000,
        1_080_000,
        1_300_000,
        990_000,
        1_010_000,
    ]


def test_sample_stats_keys(samples: list[int]) -> None:
    assert set(sample_stats(samples)) == STAT_KEYS


def test_sample_stats_known_values() -> None:
    stats = sample_stats([1_000_000_000, 2_000_000_000, 3_000_000_000, 4_000_000_000])
    assert stats["n"] == 4
    assert stats["median_seconds"] == pytest.approx(2.5)
    assert stats["mean_seconds"] == pytest.approx(2.5)
    assert stats["stdev_seconds"] == pytest.approx(math.sqrt(5 / 3))
    assert stats["min_seconds"] == pytest.approx(1.0)
    assert stats["max_seconds"] == pytest.approx(4.0)
    assert stats["cv"] == pytest.approx(math.sqrt(5 / 3) / 2.5)


def test_sample_stats_matches_numpy(samples: list[int]) -> None:
    seconds = np.array(samples, dtype=np.float64) / 1e9
    stats = sample_stats(samples)
    assert stats["n"] == len(samples)
    assert stats["median_seconds"] == pytest.approx(np.median(seconds))
    assert stats["mean_seconds"] == pytest.approx(seconds.mean())
    assert stats["stdev_seconds"] == pytest.approx(seconds.std(ddof=1))
    assert stats["min_seconds"] == pytest.approx(seconds.min())
    assert stats["max_seconds"] == pytest.approx(seconds.max())
    assert stats["p5_seconds"] == pytest.approx(np.percentile(seconds, 5))
    assert stats["p95_seconds"] == pytest.approx(np.percentile(seconds, 95))
    assert stats["cv"] == pytest.approx(seconds.std(ddof=1) / seconds.mean())


def test_sample_stats_order_does_not_matter(samples: list[int]) -> None:
    shuffled, ordered = sample_stats(samples), sample_stats(sorted(samples))
    assert {k: shuffled[k] for k in FLOAT_KEYS} == pytest.approx(
        {k: ordered[k] for k in FLOAT_KEYS}
    )
    assert shuffled["outliers"] == ordered["outliers"] and shuffled["noisy"] == ordered["noisy"]


def test_sample_stats_single_sample_has_zero_stdev() -> None:
    stats = sample_stats([2_500_000])
    assert stats["n"] == 1
    assert stats["stdev_seconds"] == 0.0
    assert stats["cv"] == 0.0
    for key in ("median_seconds", "mean_seconds", "min_seconds", "max_seconds"):
        assert stats[key] == pytest.approx(0.0025)
    assert stats["p5_seconds"] == pytest.approx(0.0025)
    assert stats["p95_seconds"] == pytest.approx(0.0025)


def test_sample_stats_empty_is_nan() -> None:
    stats = sample_stats([])
    assert set(stats) == STAT_KEYS
    assert stats["n"] == 0
    assert stats["outliers"] == 0 and stats["noisy"] is True
    for key in FLOAT_KEYS:
        assert math.isnan(stats[key]), key


def test_sample_stats_types_are_python_numbers(samples: list[int]) -> None:
    stats = sample_stats(samples)
    assert type(stats["n"]) is int and type(stats["outliers"]) is int
    assert type(stats["noisy"]) is bool
    assert all(type(stats[key]) is float for key in FLOAT_KEYS)


def test_throughput_items_and_gflops() -> None:
    result = throughput(batch_size=8, median_seconds=0.002, flops_per_item=1e9)
    assert result["items_per_second"] == pytest.approx(4000.0)
    assert result["gflops_per_second"] == pytest.approx(4000.0)


def test_throughput_gemm_example() -> None:
    flops = 2 * 1024**3
    result = throughput(batch_size=1, median_seconds=0.01, flops_per_item=flops)
    assert result["items_per_second"] == pytest.approx(100.0)
    assert result["gflops_per_second"] == pytest.approx(flops * 100 / 1e9)


@pytest.mark.parametrize("median", [0.0, -1.0, float("nan")])
def test_throughput_without_positive_median_is_nan(median: float) -> None:
    result = throughput(batch_size=4, median_seconds=median, flops_per_item=1e6)
    assert math.isnan(result["items_per_second"])
    assert math.isnan(result["gflops_per_second"])


def test_sample_stats_p99_and_median_interval(samples: list[int]) -> None:
    seconds = np.array(samples, dtype=np.float64) / 1e9
    stats = sample_stats(samples)
    assert stats["p99_seconds"] == pytest.approx(np.percentile(seconds, 99))
    assert stats["median_ci_low_seconds"] <= stats["median_seconds"]
    assert stats["median_seconds"] <= stats["median_ci_high_seconds"]
    assert stats["median_ci_high_seconds"] <= 0.0012  # the 3 ms outlier cannot drag it
    assert sample_stats(samples) == sample_stats(samples)  # seeded: same input, same interval


def test_sample_stats_interval_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(3)
    few = (1e6 * rng.lognormal(0, 0.1, 20)).astype(int).tolist()
    many = (1e6 * rng.lognormal(0, 0.1, 2000)).astype(int).tolist()
    width = [
        s["median_ci_high_seconds"] - s["median_ci_low_seconds"]
        for s in map(sample_stats, (few, many))
    ]
    assert width[1] < width[0] / 4


def test_tukey_outliers_counts_beyond_fences() -> None:
    # Quartiles 2.5 and 6 (numpy's linear interpolation), IQR 3.5: fences at -2.75 and
    # 11.25, so 100 is out and 8 is in.
    seconds = np.array([1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 100], dtype=np.float64)
    q1, q3 = np.percentile(seconds, [25, 75])
    assert (q1, q3) == (2.5, 6.0)
    assert tukey_outliers(seconds) == 1
    assert tukey_outliers(np.array([1.0, 1.0, 1.0, 1.0])) == 0


def test_sample_stats_counts_the_outlier(samples: list[int]) -> None:
    assert sample_stats(samples)["outliers"] == 1  # the 3 ms step


@pytest.mark.parametrize(
    ("n", "cv", "noisy"),
    [
        (10, 0.10, False),
        (10, 0.1001, True),
        (9, 0.01, True),
        (1000, 0.05, False),
        (50, float("nan"), True),
    ],
)
def test_is_noisy_rule(n: int, cv: float, noisy: bool) -> None:
    assert is_noisy(n, cv) is noisy


def test_sample_stats_flags_few_samples_as_noisy() -> None:
    assert sample_stats([1_000_000] * 9)["noisy"] is True
    assert sample_stats([1_000_000] * 10)["noisy"] is False
