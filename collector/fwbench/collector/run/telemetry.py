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
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families

from fwbench.collector.run.cpu_load import INTERFERENCE_COLUMNS, cpu_load, load_columns
from fwbench.collector.run.defaults import DEFAULT_INTERVAL_SECONDS as DEFAULT_INTERVAL_SECONDS
from fwbench.collector.run.scrapes import Scrape, Window, maximum, mean

if TYPE_CHECKING:
    import pandas as pd

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
    *INTERFERENCE_COLUMNS,  # cpu_load.py
    "telemetry_scrapes",
    "telemetry_error",
)


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

    def on_stage(self, stage: str) -> None:
        """Hears the cell's stages; one agent's timed phase is scraped every interval."""

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
    import pandas as pd  # when a run's series is kept: checking a command's input needs none

    rows = [
        (scrape.time, name, label, value)
        for scrape in scrapes
        for (name, label), value in scrape.values.items()
    ]
    frame = pd.DataFrame(rows, columns=list(SERIES_COLUMNS))
    frame["time"] = pd.to_datetime(frame["time"], unit="s", utc=True)
    return frame.astype({"metric": "string", "label": "string", "value": "float64"})


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
    window = Window(scrapes, start, end)
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
    columns["rss_mean_bytes"] = mean(rss)
    peak = window.first_after_end(("fwbench_process_resident_memory_peak_bytes", ""))
    columns["rss_peak_bytes"] = maximum([v for v in [*rss, peak] if not math.isnan(v)])
    gpu = gpu_label(device, window.labels("fwbench_gpu_utilization_ratio"))
    if gpu is not None:
        utilization = window.gauge(("fwbench_gpu_utilization_ratio", gpu))
        columns["gpu_utilization_mean_percent"] = 100 * mean(utilization)
        columns["gpu_utilization_peak_percent"] = 100 * maximum(utilization)
        columns["gpu_memory_peak_bytes"] = maximum(
            window.gauge(("fwbench_gpu_memory_used_bytes", gpu))
        )
        power = window.gauge(("fwbench_gpu_power_watts", gpu))
        columns["gpu_power_mean_watts"] = mean(power)
        energy = window.delta(("fwbench_gpu_energy_joules_total", gpu))
        columns["gpu_energy_joules"] = energy if not math.isnan(energy) else mean(power) * duration
    return columns
