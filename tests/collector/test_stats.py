"""Tests for fwbench.collector.stats: statistics of raw samples and derived throughput."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fwbench.collector.stats import sample_stats, throughput

STAT_KEYS = {
    "n",
    "median_seconds",
    "mean_seconds",
    "stdev_seconds",
    "min_seconds",
    "max_seconds",
    "p5_seconds",
    "p95_seconds",
    "cv",
}


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
    assert sample_stats(samples) == pytest.approx(sample_stats(sorted(samples)))


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
    for key in STAT_KEYS - {"n"}:
        assert math.isnan(stats[key]), key


def test_sample_stats_types_are_python_numbers(samples: list[int]) -> None:
    stats = sample_stats(samples)
    assert type(stats["n"]) is int
    assert all(type(stats[key]) is float for key in STAT_KEYS - {"n"})


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
