"""Resident memory of the agent process: the current RSS and its peak per workload.

The peak is the kernel's high-water mark, VmHWM in /proc/self/status. `reset_peak`, called
when a workload starts, writes "5" to /proc/self/clear_refs (Linux 4.0 and later), which
sets the high-water mark back to the current RSS, so the peak covers the current workload
only. Where that write fails (not Linux, an older kernel, a sandbox that refuses it), the
peak keeps counting from the last successful reset, or from start-up where none succeeded.
`fwbench_process_resident_memory_peak_start_time_seconds` says which: the Unix time at which
the peak's window began, equal to process_start_time_seconds where no reset ever worked.

The peak is process-wide: several agents in one process (tests) share it."""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

# What /proc/self/clear_refs takes to reset the peak RSS (Documentation/filesystems/proc.rst).
RESET_HIGH_WATER_MARK = "5"


def high_water_mark_bytes(status_text: str) -> float | None:
    """VmHWM of a /proc/PID/status text in bytes; None where the line is missing."""
    for line in status_text.splitlines():
        if line.startswith("VmHWM:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"unexpected VmHWM unit {unit!r}")
            return float(value) * 1024
    return None


def _max_rss_bytes() -> float:
    """getrusage's peak since start-up: kibibytes on Linux, bytes on macOS."""
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return float(maxrss if sys.platform == "darwin" else maxrss * 1024)


class ProcessMemoryCollector(Collector):
    """Current and peak resident memory of this process, read at scrape time.

    proc_self and clock are injectable for tests: a folder standing in for /proc/self, and the
    Unix-time clock that stamps a reset."""

    def __init__(
        self, proc_self: Path = Path("/proc/self"), clock: Callable[[], float] = time.time
    ) -> None:
        self._proc_self = proc_self
        self._clock = clock
        self._process = psutil.Process()
        self.peak_start_time = self._process.create_time()

    def reset_peak(self) -> bool:
        """Starts a new peak window now; False (window unchanged) where the kernel refuses."""
        try:
            (self._proc_self / "clear_refs").write_text(RESET_HIGH_WATER_MARK)
        except OSError:
            return False
        self.peak_start_time = self._clock()
        return True

    def peak_bytes(self) -> float:
        try:
            peak = high_water_mark_bytes((self._proc_self / "status").read_text())
        except (OSError, ValueError):
            peak = None
        return _max_rss_bytes() if peak is None else peak

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "fwbench_process_resident_memory_peak_bytes",
            "Peak resident set size of the agent process since "
            "fwbench_process_resident_memory_peak_start_time_seconds",
            value=self.peak_bytes(),
        )
        yield GaugeMetricFamily(
            "fwbench_process_resident_memory_peak_start_time_seconds",
            "Unix time the peak's window began: the current workload's start where the kernel "
            "could reset the peak, else the process start",
            value=self.peak_start_time,
        )
