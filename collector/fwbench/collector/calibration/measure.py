"""Measures this host's ceilings by running probe.py: peak GEMM FLOP/s per dtype at one thread
and at every logical CPU, with NumPy's BLAS in the collector's Python and with PyTorch in any
other interpreter given (an agent environment), keeping the best per dtype and thread count;
and STREAM-triad and read-only memory bandwidth at the same thread counts. Every figure keeps
its method. Each interpreter runs with -P in an empty folder of its own (agents/pythons.py):
a torch.py or numpy.py in the caller's folder is never imported; PYTHONPATH is honoured, as
the agents started from those environments honour it."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwbench.collector.agents.pythons import run_python, safe_path
from fwbench.collector.calibration import probe

PROBE = Path(probe.__file__)
BLAS_THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)
NUMPY_DTYPES = ("float32", "float64")
TORCH_DTYPES = ("float32", "float64", "bfloat16", "float16")
ONEDNN_DTYPES = ("float32", "bfloat16")  # oneDNN has no float64; float16 only on some CPUs


class CalibrationError(RuntimeError):
    """A probe failed; the message has its stderr."""


@dataclass(frozen=True)
class Effort:
    """How hard to measure: `full` for real use, `quick` (tiny sizes, NumPy only) for tests."""

    name: str
    max_size: int  # GEMM: largest square size tried
    gemm_seconds: float  # GEMM: timed seconds per dtype and thread count, at least
    gemm_repetitions: int
    triad_elements: int  # per array; 0 = four times the last-level cache, 128 MiB at least
    triad_repetitions: int
    gemm_rounds: int  # every GEMM probe again this many times, in turn; the best kept
    other_pythons: bool = True  # try PyTorch in the interpreters given


EFFORTS = {
    "full": Effort("full", 2048, 0.3, 3, 0, 5, 2),
    "quick": Effort("quick", 128, 0.0, 2, 1 << 16, 2, 1, other_pythons=False),
}


def last_level_cache_bytes() -> int:
    """The largest CPU cache sysfs lists (0 when it lists none)."""
    largest = 0
    for size in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = size.read_text().strip()
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        largest = max(largest, int(text.rstrip("KMG")) * units.get(text[-1], 1))
    return largest


def triad_elements(effort: Effort) -> int:
    if effort.triad_elements:
        return effort.triad_elements
    return max(4 * last_level_cache_bytes(), 128 << 20) // 8


def thread_counts() -> list[int]:
    cpus = len(os.sched_getaffinity(0))
    return sorted({1, cpus})


def _probe(python: Path, threads: int, arguments: list[str]) -> dict[str, Any]:
    env = {**os.environ, **dict.fromkeys(BLAS_THREAD_VARIABLES, str(threads))}
    command = safe_path(python, str(PROBE), *arguments, "--threads", str(threads))
    done = run_python(command, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise CalibrationError(f"{' '.join(command)} failed ({done.returncode}): {tail}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def has_torch(python: Path) -> bool:
    command = safe_path(python, "-c", "import torch")
    try:
        done = run_python(command, capture_output=True, check=False, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def gemm_trials(pythons: list[Path], effort: Effort) -> list[dict[str, Any]]:
    """Every GEMM measured: NumPy in this Python; PyTorch's BLAS and oneDNN in each of `pythons`
    that has PyTorch. A oneDNN probe that fails (a PyTorch without it, or without the private
    call it goes through) is a trial with its error, not a failed calibration."""
    runs: list[tuple[Path, str, tuple[str, ...]]] = [(Path(sys.executable), "numpy", NUMPY_DTYPES)]
    if effort.other_pythons:
        for python in filter(has_torch, pythons):
            runs += [(python, "torch", TORCH_DTYPES), (python, "onednn", ONEDNN_DTYPES)]
    trials = []
    for _, (python, library, dtypes) in itertools.product(range(effort.gemm_rounds), runs):
        for threads in thread_counts():
            arguments = ["gemm", "--library", library, "--dtypes", ",".join(dtypes)]
            arguments += ["--max-size", str(effort.max_size)]
            arguments += ["--repetitions", str(effort.gemm_repetitions)]
            arguments += ["--seconds", str(effort.gemm_seconds)]
            try:
                found = _probe(python, threads, arguments)["gemm"]
            except CalibrationError as error:
                if library != "onednn":
                    raise
                found = [{"library": library, "threads": threads, "error": str(error)}]
            trials += [{**trial, "python": str(python)} for trial in found]
    return trials


def best_peaks(trials: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{dtype: {threads: the fastest trial}}: the best library wins per dtype and thread count."""
    peaks: dict[str, dict[str, dict[str, Any]]] = {}
    for trial in (trial for trial in trials if "error" not in trial):
        at = peaks.setdefault(trial["dtype"], {})
        key = str(trial["threads"])
        if key not in at or trial["flops_per_second"] > at[key]["flops_per_second"]:
            at[key] = trial
    return peaks


def best_reads(pythons: list[Path], passes: list[str]) -> dict[str, dict[str, Any]]:
    """The read-only pass at each thread count: NumPy's in this Python, PyTorch's GEMV in each
    of `pythons` that has PyTorch; the fastest kept (as the GEMM peaks are: what this host's
    memory can deliver to the best kernel at hand)."""
    runs = [(Path(sys.executable), "numpy")] + [(p, "torch") for p in filter(has_torch, pythons)]
    best: dict[str, dict[str, Any]] = {}
    for (python, library), threads in itertools.product(runs, thread_counts()):
        found = _probe(python, threads, ["read", "--library", library, *passes])["read"]
        key = str(threads)
        if key not in best or found["bytes_per_second"] > best[key]["bytes_per_second"]:
            best[key] = {**found, "python": str(python)}
    return best


def measure(pythons: list[Path], effort: Effort) -> dict[str, Any]:
    """The calibration's measured part: peaks, every trial, bandwidth, and how long it took."""
    started = time.perf_counter()
    trials = gemm_trials(pythons, effort)
    elements = triad_elements(effort)
    passes = ["--elements", str(elements), "--repetitions", str(effort.triad_repetitions)]
    bandwidth = {
        str(threads): _probe(Path(sys.executable), threads, ["triad", *passes])["triad"]
        for threads in thread_counts()
    }
    read = best_reads(pythons if effort.other_pythons else [], passes)
    return {
        "effort": effort.name,
        "peak_flops": best_peaks(trials),
        "gemm_trials": trials,
        "bandwidth": bandwidth,
        "read_bandwidth": read,
        "method": {
            "gemm": "square C = A @ B; at each size one untimed call, then at least "
            f"{effort.gemm_repetitions} timed and {effort.gemm_seconds} s, the fastest giving "
            "2 n^3 / s; size doubled from 256 while that grows by more than "
            f"{probe.GROWTH:.0%} (at most {effort.max_size}); {effort.gemm_rounds} rounds of "
            "every library and thread count; best per dtype and thread count",
            "triad": "a = b + s * c, float64, one contiguous part per thread, blocks of "
            f"{probe.BLOCK} elements with a cached temporary; 24 bytes counted per element "
            "(b, c read, a written; write-allocate not counted); fastest of "
            f"{effort.triad_repetitions} passes over {elements} elements per array",
            "read": "a read-only pass over as many bytes as triad's arrays, counted once, "
            "nothing written: NumPy's sum of a float64 array (split and blocked as triad) and "
            "PyTorch's matrix-vector product over a float32 matrix where an interpreter has "
            f"PyTorch; the fastest of {effort.triad_repetitions} passes, the best library kept",
            "last_level_cache_bytes": last_level_cache_bytes(),
            "thread_counts": thread_counts(),
        },
        "seconds": time.perf_counter() - started,
    }
