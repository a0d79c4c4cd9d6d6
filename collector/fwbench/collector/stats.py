"""Statistics of one cell, computed by the collector from the agent's raw samples."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def sample_stats(samples_ns: Sequence[int]) -> dict[str, float]:
    """n, median, mean, stdev (n-1), min, max, p5, p95 in seconds, and the coefficient of
    variation (stdev / mean). Empty input gives n=0 and NaN elsewhere."""
    seconds = np.asarray(samples_ns, dtype=np.float64) / 1e9
    if seconds.size == 0:
        nan = float("nan")
        return {
            "n": 0,
            "median_seconds": nan,
            "mean_seconds": nan,
            "stdev_seconds": nan,
            "min_seconds": nan,
            "max_seconds": nan,
            "p5_seconds": nan,
            "p95_seconds": nan,
            "cv": nan,
        }
    mean = float(seconds.mean())
    stdev = float(seconds.std(ddof=1)) if seconds.size > 1 else 0.0
    p5, median, p95 = (float(v) for v in np.percentile(seconds, [5, 50, 95]))
    return {
        "n": int(seconds.size),
        "median_seconds": median,
        "mean_seconds": mean,
        "stdev_seconds": stdev,
        "min_seconds": float(seconds.min()),
        "max_seconds": float(seconds.max()),
        "p5_seconds": p5,
        "p95_seconds": p95,
        "cv": stdev / mean if mean > 0 else float("nan"),
    }


def throughput(batch_size: int, median_seconds: float, flops_per_item: float) -> dict[str, float]:
    """Items per second and achieved GFLOP/s at the median step time."""
    if not median_seconds > 0:
        return {"items_per_second": float("nan"), "gflops_per_second": float("nan")}
    return {
        "items_per_second": batch_size / median_seconds,
        "gflops_per_second": flops_per_item * batch_size / median_seconds / 1e9,
    }
