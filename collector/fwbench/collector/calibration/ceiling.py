"""A row's ceiling from its host's calibration: the peak FLOP/s for its dtype and thread count,
the memory bandwidth, and the fraction of that peak the row achieved.

Thread counts between those measured (one, and every logical CPU) are scaled from one:
peak(t) = max(peak(1), min(t x peak(1), peak(all))), the same for bandwidth. On a machine
others share, the all-CPU figure can come out below one CPU's; a ceiling is then never below
what one CPU reached. A row that achieved more than the ceiling (noise, or a library faster
than those calibrated) has a fraction above 1; it is reported as measured, never clipped."""

from __future__ import annotations

import math
from typing import Any

CEILING_COLUMNS = (
    "arithmetic_intensity",
    "peak_flops_per_second",
    "peak_fraction",
    "bandwidth_bytes_per_second",
    "calibration_id",
)


def _scaled(by_threads: dict[str, float], threads: int) -> float | None:
    if not by_threads:
        return None
    counts = sorted(int(t) for t in by_threads)
    one = by_threads.get("1")
    most = by_threads[str(counts[-1])]
    if one is None:
        return most
    return max(one, min(threads * one, most))


def peak_flops(calibration: dict[str, Any], dtype: str, threads: int) -> float | None:
    """Peak FLOP/s of `dtype` at `threads`, or None when the calibration did not measure it."""
    trials = calibration.get("peak_flops", {}).get(dtype, {})
    return _scaled({t: trial["flops_per_second"] for t, trial in trials.items()}, threads)


def bandwidth(calibration: dict[str, Any], threads: int) -> float | None:
    triads = calibration.get("bandwidth", {})
    return _scaled({t: triad["bytes_per_second"] for t, triad in triads.items()}, threads)


def all_threads(calibration: dict[str, Any]) -> int:
    counts = calibration.get("method", {}).get("thread_counts") or [1]
    return int(max(counts))


def row_threads(row: dict[str, Any], calibration: dict[str, Any]) -> int:
    """Threads the row ran with: intra-op threads in effect, else its usable cores, else
    every logical CPU the calibration measured."""
    for key in ("intra_op_threads", "usable_cores"):
        value = row.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return all_threads(calibration)


def ceiling_columns(
    row: dict[str, Any], calibration: dict[str, Any] | None, intensity: float | None
) -> dict[str, Any]:
    """The ceiling columns of a measured row (None where unknown: no calibration, no FLOPs
    in the catalogue, a dtype not calibrated; never 0)."""
    columns: dict[str, Any] = dict.fromkeys(CEILING_COLUMNS)
    columns["arithmetic_intensity"] = intensity
    if calibration is None:
        return columns
    threads = row_threads(row, calibration)
    peak = peak_flops(calibration, str(row.get("dtype")), threads)
    achieved = row.get("gflops_per_second")
    columns["calibration_id"] = calibration["id"]
    columns["peak_flops_per_second"] = peak
    columns["bandwidth_bytes_per_second"] = bandwidth(calibration, threads)
    if peak and isinstance(achieved, float) and achieved > 0 and math.isfinite(achieved):
        columns["peak_fraction"] = achieved * 1e9 / peak
    return columns
