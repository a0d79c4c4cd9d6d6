"""Statistics of one cell, computed by the collector from the agent's raw samples.

The rules (docs/report.md): the median is the headline, with a seeded bootstrap 95% confidence
interval (bootstrap.py); outliers are counted with Tukey's fences (below Q1 - 1.5 IQR or above
Q3 + 1.5 IQR) and kept, never dropped; a cell is flagged noisy when its coefficient of variation
exceeds NOISY_CV or it has fewer than MIN_SAMPLES samples."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from fwbench.collector.stats.bootstrap import median_interval

# pyperf warns that a benchmark "seems unstable" past the same 10% (stdev / mean).
NOISY_CV = 0.10
# The timing loop's default minimum number of iterations (docs/measurement.md).
MIN_SAMPLES = 10
TUKEY_K = 1.5

STAT_NAMES = (
    "n",
    "median_seconds",
    "median_ci_low_seconds",
    "median_ci_high_seconds",
    "mean_seconds",
    "stdev_seconds",
    "min_seconds",
    "max_seconds",
    "p5_seconds",
    "p95_seconds",
    "p99_seconds",
    "cv",
    "outliers",
    "noisy",
)


def tukey_outliers(seconds: np.ndarray[Any, np.dtype[np.float64]]) -> int:
    """Samples outside Q1 - 1.5 IQR .. Q3 + 1.5 IQR."""
    q1, q3 = np.percentile(seconds, [25, 75])
    spread = TUKEY_K * (q3 - q1)
    return int(np.count_nonzero((seconds < q1 - spread) | (seconds > q3 + spread)))


def is_noisy(n: int, cv: float) -> bool:
    return n < MIN_SAMPLES or not cv <= NOISY_CV  # NaN CV is noisy too


def sample_stats(samples_ns: Sequence[int]) -> dict[str, Any]:
    """STAT_NAMES of the samples: times in seconds, stdev with n-1, cv = stdev / mean,
    outliers an int, noisy a bool. Empty input gives n=0, noisy and NaN elsewhere."""
    seconds = np.asarray(samples_ns, dtype=np.float64) / 1e9
    if seconds.size == 0:
        empty: dict[str, Any] = dict.fromkeys(STAT_NAMES, float("nan"))
        return {**empty, "n": 0, "outliers": 0, "noisy": True}
    mean = float(seconds.mean())
    stdev = float(seconds.std(ddof=1)) if seconds.size > 1 else 0.0
    p5, median, p95, p99 = (float(v) for v in np.percentile(seconds, [5, 50, 95, 99]))
    ci_low, ci_high = median_interval([seconds])
    cv = stdev / mean if mean > 0 else float("nan")
    return {
        "n": int(seconds.size),
        "median_seconds": median,
        "median_ci_low_seconds": ci_low,
        "median_ci_high_seconds": ci_high,
        "mean_seconds": mean,
        "stdev_seconds": stdev,
        "min_seconds": float(seconds.min()),
        "max_seconds": float(seconds.max()),
        "p5_seconds": p5,
        "p95_seconds": p95,
        "p99_seconds": p99,
        "cv": cv,
        "outliers": tukey_outliers(seconds),
        "noisy": is_noisy(int(seconds.size), cv),
    }


def throughput(batch_size: int, median_seconds: float, flops_per_item: float) -> dict[str, float]:
    """Items per second and achieved GFLOP/s at the median step time (NaN for a workload that
    computes nothing the catalogue counts, such as a collective)."""
    if not median_seconds > 0:
        return {"items_per_second": float("nan"), "gflops_per_second": float("nan")}
    flops = flops_per_item * batch_size / median_seconds / 1e9 if flops_per_item else float("nan")
    return {"items_per_second": batch_size / median_seconds, "gflops_per_second": flops}
