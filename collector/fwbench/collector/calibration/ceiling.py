"""A row's ceiling from its host's calibration: the peak FLOP/s for its dtype and thread count,
the memory bandwidth, and the fraction of that peak the row achieved.

Thread counts between those measured (one, and every logical CPU) are scaled from one:
peak(t) = max(peak(1), min(t x peak(1), peak(all))), the same for bandwidth. On a machine
others share, the all-CPU figure can come out below one CPU's; a ceiling is then never below
what one CPU reached. A row that achieved more than the ceiling (noise, or a library faster
than those calibrated) raises the ceiling instead (observe): the ceiling of a dtype at t threads
is then the best of the calibrated peak and the best FLOP/s a row of this host reached at t
threads or fewer, and the calibration records which row that was (docs/calibration.md)."""

from __future__ import annotations

import math
from typing import Any

CEILING_COLUMNS = (
    "arithmetic_intensity",
    "peak_flops_per_second",
    "peak_fraction",
    "bandwidth_bytes_per_second",
    "read_bandwidth_bytes_per_second",
    "calibration_id",
)
# What an observed ceiling records of the row that set it.
OBSERVED_FROM = (
    "cell",
    "agent",
    "workload",
    "phase",
    "batch_size",
    "params",
    "mode",
    "intra_op_threads",
    "measure_started_at",
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


def calibrated_peak(calibration: dict[str, Any], dtype: str, threads: int) -> float | None:
    """Peak FLOP/s of `dtype` at `threads` as measured, or None when it was not measured."""
    trials = calibration.get("peak_flops", {}).get(dtype, {})
    return _scaled({t: trial["flops_per_second"] for t, trial in trials.items()}, threads)


def observed_peak(calibration: dict[str, Any], dtype: str, threads: int) -> float | None:
    """The best FLOP/s a row of this host reached in `dtype` at `threads` or fewer (what more
    threads can do, fewer did), or None."""
    seen = calibration.get("observed", {}).get(dtype, {})
    rates = [row["flops_per_second"] for t, row in seen.items() if int(t) <= threads]
    return max(rates, default=None)


def peak_flops(calibration: dict[str, Any], dtype: str, threads: int) -> float | None:
    """The ceiling of `dtype` at `threads`: the calibrated peak, raised to the best a row
    reached (observed_peak) when that is higher; None when `dtype` was not calibrated."""
    calibrated = calibrated_peak(calibration, dtype, threads)
    if calibrated is None:
        return None
    return max(calibrated, observed_peak(calibration, dtype, threads) or 0.0)


def observe(calibration: dict[str, Any], row: dict[str, Any], run_id: str) -> bool:
    """Raises the calibration's ceiling for the row's dtype and threads to the FLOP/s the row
    achieved, when that is above the ceiling; records which row. Whether it did.

    Only inference rows raise it: their FLOPs are the catalogue's count of the forward pass,
    while a training step is charged a stated model (3x forward) that a framework can beat by
    doing less (measured: TensorFlow's gemm training step at 697 GFLOP/s on a 2-core AMD EPYC
    whose inference rows reach 482, above what two cores can do), which would scale every
    other row's fraction down. A training row faster than the ceiling keeps a fraction above
    1, which says its FLOPs are overcounted. Nor do a model file's rows: their FLOPs are a
    framework counter's (XLA's counts elementwise arithmetic too), not the catalogue's."""
    achieved = row.get("gflops_per_second")
    if row.get("status", "ok") != "ok" or not isinstance(achieved, float):
        return False
    if row.get("phase") == "train" or (row.get("flops_counter") or "catalogue") != "catalogue":
        return False
    if not (achieved > 0 and math.isfinite(achieved)):
        return False
    dtype, threads = str(row.get("dtype")), row_threads(row, calibration)
    peak = peak_flops(calibration, dtype, threads)
    if peak is None or achieved * 1e9 <= peak:
        return False
    source = {key: _plain(row.get(key)) for key in OBSERVED_FROM}
    at = calibration.setdefault("observed", {}).setdefault(dtype, {})
    at[str(threads)] = {
        "flops_per_second": achieved * 1e9,
        "calibrated_flops_per_second": calibrated_peak(calibration, dtype, threads),
        "run_id": run_id,
        **source,
    }
    return True


def _plain(value: Any) -> Any:
    """JSON as it is, anything else (a timestamp) as its text."""
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


def merge_observed(into: dict[str, Any], observed: dict[str, Any]) -> bool:
    """Adds to `into` (a calibration) each observed ceiling of `observed` that is higher than
    its own; whether any was."""
    changed = False
    for dtype, by_threads in observed.items():
        mine = into.setdefault("observed", {}).setdefault(dtype, {})
        for threads, row in by_threads.items():
            if threads not in mine or row["flops_per_second"] > mine[threads]["flops_per_second"]:
                mine[threads], changed = dict(row), True
    return changed


def bandwidth(calibration: dict[str, Any], threads: int, kind: str = "bandwidth") -> float | None:
    """Triad bandwidth at `threads`; kind "read_bandwidth" the read-only pass's (None in a
    calibration from before it was measured)."""
    passes = calibration.get(kind, {})
    return _scaled({t: found["bytes_per_second"] for t, found in passes.items()}, threads)


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
    columns["read_bandwidth_bytes_per_second"] = bandwidth(calibration, threads, "read_bandwidth")
    if peak and isinstance(achieved, float) and achieved > 0 and math.isfinite(achieved):
        columns["peak_fraction"] = achieved * 1e9 / peak
    return columns
