"""Telemetry of one cell: the collector scrapes the agent's Prometheus /metrics while the cell
runs, keeps the raw series, and reduces them to per-cell columns over the timed phase the
agent reports (measure_started_at .. measure_ended_at).

Method (docs/telemetry.md, "Collector scraping"):
- One scrape just before the Run request, one every `interval` seconds while it runs (a
  background thread), one right after the result. Each scrape is stamped with the midpoint of
  its HTTP request on the collector's wall clock, the clock the agent's timestamps use too.
- Counters (CPU seconds, GPU energy) are interpolated linearly at the start and end of the
  timed phase and differenced, so a phase shorter than the interval still gets a figure (its
  edges are then only as exact as the interpolation; a smaller interval sharpens them).
- Gauges (memory, GPU utilisation and power) are averaged and maximised over the scrapes
  inside the phase, or over the two bracketing scrapes when none falls inside.
"""

from __future__ import annotations

import math
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

DEFAULT_INTERVAL_SECONDS = 0.25

# The agent's resident memory: client_python's standard process collector series (the agent
# exports RSS once, under this name; agents of any version expose it).
RSS = "process_resident_memory_bytes"
# Series the collector keeps, by sample name; the label that tells them apart.
WATCHED: dict[str, str] = {
    "fwbench_process_cpu_seconds_total": "mode",
    RSS: "",
    "fwbench_process_resident_memory_peak_bytes": "",
    "fwbench_process_threads": "",
    "fwbench_host_cpu_seconds_total": "mode",
    "fwbench_host_memory_available_bytes": "",
    "fwbench_gpu_utilization_ratio": "gpu",
    "fwbench_gpu_memory_used_bytes": "gpu",
    "fwbench_gpu_power_watts": "gpu",
    "fwbench_gpu_energy_joules_total": "gpu",
    "fwbench_gpu_sm_clock_hertz": "gpu",
    "fwbench_gpu_temperature_celsius": "gpu",
    # What else ran on the agent's CPUs (the runtime's hostload.py; docs/telemetry.md,
    # "Interference"). Several labels are named with spaces, their values joined by one.
    "fwbench_affinity_cpu_seconds_total": "mode",
    "fwbench_affinity_cpus": "",
    "fwbench_affinity_info": "cpus kernel",
    "fwbench_host_pressure_cpu_waiting_seconds_total": "",
    "fwbench_host_pressure_memory_waiting_seconds_total": "",
    "fwbench_affinity_cpu_frequency_hertz": "",
}
SERIES_COLUMNS = ("time", "metric", "label", "value")

# The per-cell columns this module fills (schema.py describes them).
TELEMETRY_COLUMNS = (
    "cpu_user_percent",
    "cpu_system_percent",
    "host_cpu_busy_percent",
    "host_iowait_percent",
    "rss_mean_bytes",
    "rss_peak_bytes",
    "gpu_utilization_mean_percent",
    "gpu_utilization_peak_percent",
    "gpu_memory_peak_bytes",
    "gpu_power_mean_watts",
    "gpu_energy_joules",
    "agent_cpus",
    "others_cpu_percent",
    "steal_percent",
    "cpu_pressure_percent",
    "memory_pressure_percent",
    "cpu_frequency_mean_hertz",
    "telemetry_scrapes",
    "telemetry_error",
)
# Interference is judged over the timed phase widened to at least this long around its middle:
# /proc/stat counts in ticks of 10 ms per CPU, so over a shorter window a few ticks either way
# would read as several percent of the CPUs.
INTERFERENCE_WINDOW_SECONDS = 1.0
# Busy modes of /proc/stat: what some process (or the kernel for one) ran. Idle and iowait are
# nobody's, steal is the hypervisor's (its own column).
BUSY_MODES = ("user", "nice", "system", "irq", "softirq")


def parse_exposition(text: str) -> dict[tuple[str, str], float]:
    """The watched samples of one /metrics text: {(sample name, label value): value}."""
    values: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            label = WATCHED.get(sample.name)
            if label is None:
                continue
            value = " ".join(sample.labels.get(name, "") for name in label.split())
            values[(sample.name, value)] = sample.value
    return values


@dataclass
class Scrape:
    time: float  # unix seconds, midpoint of the HTTP request
    values: dict[tuple[str, str], float]


@dataclass
class Scraper:
    """Scrapes http://ADDRESS/metrics before, during (every `interval` s, when > 0) and after a
    cell: `with Scraper(address, interval) as scraper: run the cell`. Failures are counted,
    never raised: telemetry must not fail a measurement."""

    address: str
    interval: float = DEFAULT_INTERVAL_SECONDS
    timeout: float = 2.0
    scrapes: list[Scrape] = field(default_factory=list)
    errors: int = 0
    last_error: str = ""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def scrape_once(self) -> None:
        url = f"http://{self.address}/metrics"
        begin = time.time()
        try:
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                text = response.read().decode()
            values = parse_exposition(text)
        except (OSError, ValueError, urllib.error.URLError) as error:
            self.errors += 1
            self.last_error = f"scraping {url} failed: {error}"
            return
        self.scrapes.append(Scrape((begin + time.time()) / 2, values))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.scrape_once()

    def __enter__(self) -> Scraper:
        self.scrape_once()
        if self.interval > 0:
            self._thread = threading.Thread(target=self._loop, name="scraper", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.scrape_once()

    def series(self) -> pd.DataFrame:
        """Long format: time (UTC), metric, label, value; one row per scraped sample."""
        return series_frame(self.scrapes)

    def summary(self, start: float, end: float, device: str = "") -> dict[str, Any]:
        """The cell's telemetry columns over [start, end] (summarize)."""
        return summarize(self.scrapes, start, end, device)


def series_frame(scrapes: Iterable[Scrape]) -> pd.DataFrame:
    rows = [
        (scrape.time, name, label, value)
        for scrape in scrapes
        for (name, label), value in scrape.values.items()
    ]
    frame = pd.DataFrame(rows, columns=list(SERIES_COLUMNS))
    frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True)
    return frame.astype({"metric": "string", "label": "string", "value": "float64"})


def _interpolate(points: Sequence[tuple[float, float]], at: float) -> float:
    """Linear interpolation of a counter at time `at`, clamped to the first/last point."""
    times, values = zip(*points, strict=True)
    return float(np.interp(at, times, values))


class _Window:
    """The scrapes of one cell seen over its timed phase [start, end] (unix seconds)."""

    def __init__(self, scrapes: Sequence[Scrape], start: float, end: float) -> None:
        self.scrapes = sorted(scrapes, key=lambda s: s.time)
        self.start, self.end = start, end
        inside = [s for s in self.scrapes if start <= s.time <= end]
        if not inside:  # a phase shorter than the interval: use the scrapes around it
            before = [s for s in self.scrapes if s.time < start][-1:]
            after = [s for s in self.scrapes if s.time > end][:1]
            inside = before + after
        self.inside = inside

    def points(self, key: tuple[str, str]) -> list[tuple[float, float]]:
        return [(s.time, s.values[key]) for s in self.scrapes if key in s.values]

    def delta(self, key: tuple[str, str]) -> float:
        points = self.points(key)
        if not points:
            return math.nan
        return _interpolate(points, self.end) - _interpolate(points, self.start)

    def gauge(self, key: tuple[str, str]) -> list[float]:
        return [s.values[key] for s in self.inside if key in s.values]

    def labels(self, metric: str) -> set[str]:
        return {label for s in self.scrapes for (name, label) in s.values if name == metric}

    def first_after_end(self, key: tuple[str, str]) -> float:
        later = [s.values[key] for s in self.scrapes if s.time >= self.end and key in s.values]
        return later[0] if later else math.nan


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def _max(values: Sequence[float]) -> float:
    return max(values) if values else math.nan


def gpu_label(device: str, labels: set[str]) -> str | None:
    """The NVML index of the device a cell ran on: N for "cuda:N" (CUDA and NVML number the
    same devices alike when CUDA_VISIBLE_DEVICES is unset), the only GPU when there is one."""
    if not labels:
        return None
    if device.startswith(("cuda", "gpu")):
        index = device.rpartition(":")[2] if ":" in device else "0"
        if index in labels:
            return index
    return next(iter(labels)) if len(labels) == 1 else None


@dataclass(frozen=True)
class CpuLoad:
    """What one agent's CPUs did over the interference window: seconds summed over the CPUs
    of its affinity mask (busy, steal, all modes), the agent process's own CPU seconds, and
    the host's PSI waiting seconds; `kernel` and `cpus` say whose /proc/stat it is."""

    kernel: str
    cpus: str
    count: int
    seconds: float  # the window's length
    busy: float
    steal: float
    total: float
    agent: float
    cpu_waiting: float
    memory_waiting: float
    frequency: float


def cpu_load(scrapes: Sequence[Scrape], start: float, end: float) -> CpuLoad | None:
    """The agent's CPUs over [start, end] widened to INTERFERENCE_WINDOW_SECONDS around its
    middle (within the scrapes there are); None without the affinity series (an agent of a
    runtime before them, or a host whose /proc/stat cannot be read)."""
    middle = (start + end) / 2
    half = max(end - start, INTERFERENCE_WINDOW_SECONDS) / 2
    window = _Window(scrapes, middle - half, middle + half)
    if not window.scrapes:
        return None
    first, last = window.scrapes[0].time, window.scrapes[-1].time
    window.start, window.end = max(window.start, first), min(window.end, last)
    affinity = "fwbench_affinity_cpu_seconds_total"
    modes = {mode: window.delta((affinity, mode)) for mode in window.labels(affinity)}
    counts = window.gauge(("fwbench_affinity_cpus", ""))
    info = sorted(window.labels("fwbench_affinity_info"))
    if not modes or not counts or not window.end > window.start:
        return None
    cpus, _, kernel = (info[-1] if info else "").partition(" ")
    process = "fwbench_process_cpu_seconds_total"
    pressure = "fwbench_host_pressure_{}_waiting_seconds_total"
    return CpuLoad(
        kernel=kernel,
        cpus=cpus,
        count=int(counts[-1]),
        seconds=window.end - window.start,
        busy=sum(modes.get(mode, 0.0) for mode in BUSY_MODES),
        steal=modes.get("steal", 0.0),
        total=sum(modes.values()),
        agent=window.delta((process, "user")) + window.delta((process, "system")),
        cpu_waiting=window.delta((pressure.format("cpu"), "")),
        memory_waiting=window.delta((pressure.format("memory"), "")),
        frequency=_mean(window.gauge(("fwbench_affinity_cpu_frequency_hertz", ""))),
    )


def load_columns(loads: Sequence[CpuLoad]) -> dict[str, Any]:
    """The interference columns of one agent's, or a world's ranks', CPU loads. Ranks that read
    one kernel's /proc/stat for the same CPUs share them: their busy time is counted once and
    all their own CPU time taken from it; ranks on other CPUs or kernels add theirs."""
    columns: dict[str, Any] = {
        "agent_cpus": pd.NA,
        "others_cpu_percent": math.nan,
        "steal_percent": math.nan,
        "cpu_pressure_percent": math.nan,
        "memory_pressure_percent": math.nan,
        "cpu_frequency_mean_hertz": math.nan,
    }
    if not loads:
        return columns
    shared: dict[tuple[str, str], list[CpuLoad]] = {}
    for load in loads:
        shared.setdefault((load.kernel, load.cpus), []).append(load)
    groups = [(ranks[0], sum(rank.agent for rank in ranks)) for ranks in shared.values()]
    total = sum(first.total for first, _ in groups)
    if not total > 0:
        return columns
    others = sum(first.busy - agents for first, agents in groups)
    columns["agent_cpus"] = sum(first.count for first, _ in groups)
    # Slightly below zero is the ticks' rounding, never others' use: shown as 0.
    columns["others_cpu_percent"] = max(100 * others / total, 0.0)
    columns["steal_percent"] = 100 * sum(first.steal for first, _ in groups) / total
    first = loads[0]  # pressure is the host's: rank 0's host stands for the world's
    columns["cpu_pressure_percent"] = 100 * first.cpu_waiting / first.seconds
    columns["memory_pressure_percent"] = 100 * first.memory_waiting / first.seconds
    columns["cpu_frequency_mean_hertz"] = _mean(
        [load.frequency for load in loads if not math.isnan(load.frequency)]
    )
    return columns


def summarize(
    scrapes: Sequence[Scrape], start: float, end: float, device: str = ""
) -> dict[str, Any]:
    """Per-cell telemetry columns over the timed phase [start, end] (unix seconds)."""
    columns: dict[str, Any] = dict.fromkeys(TELEMETRY_COLUMNS[:-2], math.nan)
    columns.update(load_columns([]))
    columns["telemetry_scrapes"] = 0
    columns["telemetry_error"] = None
    if len(scrapes) < 2 or not end > start:
        columns["telemetry_error"] = "fewer than two scrapes" if end > start else "no phase"
        return columns
    window = _Window(scrapes, start, end)
    duration = end - start
    columns["telemetry_scrapes"] = sum(1 for s in window.scrapes if start <= s.time <= end)
    process = "fwbench_process_cpu_seconds_total"
    columns["cpu_user_percent"] = 100 * window.delta((process, "user")) / duration
    columns["cpu_system_percent"] = 100 * window.delta((process, "system")) / duration
    host = "fwbench_host_cpu_seconds_total"
    modes = {mode: window.delta((host, mode)) for mode in window.labels(host)}
    total = sum(modes.values())
    if modes and total > 0:
        busy = total - modes.get("idle", 0.0) - modes.get("iowait", 0.0)
        columns["host_cpu_busy_percent"] = 100 * busy / total
        columns["host_iowait_percent"] = 100 * modes.get("iowait", math.nan) / total
    load = cpu_load(scrapes, start, end)
    columns.update(load_columns([load] if load else []))
    rss = window.gauge((RSS, ""))
    columns["rss_mean_bytes"] = _mean(rss)
    peak = window.first_after_end(("fwbench_process_resident_memory_peak_bytes", ""))
    columns["rss_peak_bytes"] = _max([v for v in [*rss, peak] if not math.isnan(v)])
    gpu = gpu_label(device, window.labels("fwbench_gpu_utilization_ratio"))
    if gpu is not None:
        utilization = window.gauge(("fwbench_gpu_utilization_ratio", gpu))
        columns["gpu_utilization_mean_percent"] = 100 * _mean(utilization)
        columns["gpu_utilization_peak_percent"] = 100 * _max(utilization)
        columns["gpu_memory_peak_bytes"] = _max(
            window.gauge(("fwbench_gpu_memory_used_bytes", gpu))
        )
        power = window.gauge(("fwbench_gpu_power_watts", gpu))
        columns["gpu_power_mean_watts"] = _mean(power)
        energy = window.delta(("fwbench_gpu_energy_joules_total", gpu))
        columns["gpu_energy_joules"] = energy if not math.isnan(energy) else _mean(power) * duration
    return columns
