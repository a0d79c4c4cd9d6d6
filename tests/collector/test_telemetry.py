"""Tests for fwbench.collector.run.telemetry: parsing a real agent exposition, scraping a real HTTP
endpoint, and reducing scrapes to per-cell columns over the timed phase."""

from __future__ import annotations

import math
import socket
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest, start_http_server

from fwbench.collector.run.telemetry import (
    TELEMETRY_COLUMNS,
    Scrape,
    Scraper,
    gpu_label,
    parse_exposition,
    series_frame,
    summarize,
)
from fwbench.collector.store.database import ResultStore
from fwbench.runtime.metrics import AgentMetrics

CPU = "fwbench_process_cpu_seconds_total"
HOST = "fwbench_host_cpu_seconds_total"
RSS = "process_resident_memory_bytes"  # client_python's standard name, no fwbench_ prefix
PEAK = "fwbench_process_resident_memory_peak_bytes"
ENERGY = "fwbench_gpu_energy_joules_total"
POWER = "fwbench_gpu_power_watts"
UTIL = "fwbench_gpu_utilization_ratio"


def scrape(t: float, **values: float) -> Scrape:
    """A scrape at time t; keyword names are METRIC__LABEL (label may be empty), METRIC
    without its fwbench_ prefix, or `rss` for the standard RSS series."""
    parsed = {}
    for key, value in values.items():
        metric, _, label = key.partition("__")
        parsed[(RSS if metric == "rss" else f"fwbench_{metric}", label)] = value
    return Scrape(t, parsed)


def cpu_scrapes(rate_user: float, rate_system: float, times: list[float]) -> list[Scrape]:
    """A process burning `rate` CPU seconds per second since t=0, on a 4-CPU host that is
    half idle and 10% iowait."""
    return [
        scrape(
            t,
            process_cpu_seconds_total__user=rate_user * t,
            process_cpu_seconds_total__system=rate_system * t,
            host_cpu_seconds_total__user=1.6 * t,
            host_cpu_seconds_total__idle=2.0 * t,
            host_cpu_seconds_total__iowait=0.4 * t,
            rss=1000.0 + t,
        )
        for t in times
    ]


def test_counters_are_differenced_over_the_timed_phase_only() -> None:
    # Scrapes every 0.25 s from 0 to 10 s; the timed phase is 2.1 .. 7.9 s.
    times = [i * 0.25 for i in range(41)]
    columns = summarize(cpu_scrapes(1.5, 0.1, times), 2.1, 7.9)
    assert columns["cpu_user_percent"] == pytest.approx(150.0)
    assert columns["cpu_system_percent"] == pytest.approx(10.0)
    assert columns["host_cpu_busy_percent"] == pytest.approx(40.0)
    assert columns["host_iowait_percent"] == pytest.approx(10.0)
    assert columns["telemetry_scrapes"] == 23  # 2.25 .. 7.75
    assert columns["rss_mean_bytes"] == pytest.approx(1000.0 + 5.0)
    assert columns["telemetry_error"] is None


def test_a_phase_shorter_than_the_interval_is_interpolated_between_its_neighbours() -> None:
    # The process works only during the phase 1.1 .. 1.2 s; scrapes at 1.0 and 1.5 s.
    scrapes = [
        scrape(1.0, process_cpu_seconds_total__user=0.0, rss=5.0),
        scrape(1.5, process_cpu_seconds_total__user=0.5, rss=7.0),
    ]
    columns = summarize(scrapes, 1.1, 1.2)
    assert columns["telemetry_scrapes"] == 0
    assert columns["cpu_user_percent"] == pytest.approx(100.0)
    assert columns["rss_mean_bytes"] == pytest.approx(6.0)  # the two bracketing scrapes
    assert columns["rss_peak_bytes"] == pytest.approx(7.0)


def test_peak_memory_comes_from_the_high_water_mark_after_the_phase() -> None:
    scrapes = [
        scrape(0.0, rss=100.0, process_resident_memory_peak_bytes=100.0),
        scrape(1.0, rss=150.0, process_resident_memory_peak_bytes=900.0),
        scrape(2.0, rss=120.0, process_resident_memory_peak_bytes=900.0),
    ]
    columns = summarize(scrapes, 0.5, 1.5)
    assert columns["rss_peak_bytes"] == 900.0  # a spike no scrape saw, kept by the kernel
    assert columns["rss_mean_bytes"] == 150.0


def test_gpu_columns_use_the_energy_counter_of_the_cell_device() -> None:
    scrapes = [
        scrape(
            t,
            gpu_utilization_ratio__0=0.9,
            gpu_utilization_ratio__1=0.1,
            gpu_power_watts__0=300.0,
            gpu_power_watts__1=60.0,
            gpu_energy_joules_total__0=280.0 * t,
            gpu_energy_joules_total__1=60.0 * t,
            gpu_memory_used_bytes__0=2e9 + t,
        )
        for t in (0.0, 1.0, 2.0, 3.0, 4.0)
    ]
    columns = summarize(scrapes, 1.0, 3.0, device="cuda:0")
    assert columns["gpu_utilization_mean_percent"] == pytest.approx(90.0)
    assert columns["gpu_power_mean_watts"] == pytest.approx(300.0)
    assert columns["gpu_energy_joules"] == pytest.approx(560.0)  # counter, not power x time
    assert columns["gpu_memory_peak_bytes"] == pytest.approx(2e9 + 3)
    other = summarize(scrapes, 1.0, 3.0, device="cuda:1")
    assert other["gpu_energy_joules"] == pytest.approx(120.0)


def test_without_an_energy_counter_energy_is_mean_power_times_duration() -> None:
    scrapes = [
        scrape(t, gpu_utilization_ratio__0=0.5, gpu_power_watts__0=100.0 + 10 * t)
        for t in (0.0, 1.0, 2.0)
    ]
    columns = summarize(scrapes, 0.0, 2.0, device="cuda:0")
    assert columns["gpu_energy_joules"] == pytest.approx(110.0 * 2.0)


def test_gpu_label_picks_the_cell_device() -> None:
    assert gpu_label("cuda:1", {"0", "1"}) == "1"
    assert gpu_label("cpu", {"0"}) == "0"  # the only GPU
    assert gpu_label("cpu", {"0", "1"}) is None  # ambiguous: no GPU columns
    assert gpu_label("cuda:0", set()) is None


def test_cpu_only_scrapes_leave_gpu_columns_empty() -> None:
    columns = summarize(cpu_scrapes(1.0, 0.0, [0.0, 1.0, 2.0]), 0.5, 1.5)
    assert set(columns) == set(TELEMETRY_COLUMNS)
    assert math.isnan(columns["gpu_utilization_mean_percent"])
    assert math.isnan(columns["gpu_energy_joules"])


def test_too_few_scrapes_is_reported_not_raised() -> None:
    columns = summarize([scrape(0.0, process_cpu_seconds_total__user=1.0)], 0.0, 1.0)
    assert columns["telemetry_error"] == "fewer than two scrapes"
    assert math.isnan(columns["cpu_user_percent"])


def test_parse_exposition_reads_a_real_agent_exposition() -> None:
    metrics = AgentMetrics({"name": "test"})
    parsed = parse_exposition(generate_latest(metrics.registry).decode())
    assert {label for name, label in parsed if name == CPU} == {"user", "system"}
    assert {"user", "system", "idle", "iowait"} <= {lab for name, lab in parsed if name == HOST}
    assert parsed[(CPU, "user")] > 0
    assert parsed[(RSS, "")] > 0
    # Only watched series are kept: no histogram buckets, no python_gc.
    assert all(name.startswith("fwbench_") or name == RSS for name, _ in parsed)
    assert not any(name.endswith("_bucket") for name, _ in parsed)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_scraper_scrapes_before_during_and_after_a_cell() -> None:
    registry = CollectorRegistry()
    cpu = Counter("fwbench_process_cpu_seconds", "test", ["mode"], registry=registry)
    cpu.labels("user")  # present at 0 from the first scrape on
    Gauge(RSS, "test", registry=registry).set(42)
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        with Scraper(f"127.0.0.1:{port}", interval=0.05) as scraper:
            for _ in range(5):
                cpu.labels("user").inc(1.0)
                time.sleep(0.05)
        assert scraper.errors == 0
        assert len(scraper.scrapes) >= 4  # first, a few periodic ones, last
        values = [s.values[(CPU, "user")] for s in scraper.scrapes]
        assert values[0] == 0.0 and values[-1] == 5.0
        assert values == sorted(values)
        series = scraper.series()
        assert list(series.columns) == ["time", "metric", "label", "value"]
        assert str(series["time"].dtype) == "datetime64[ns, UTC]"
        assert set(series["metric"]) == {CPU, RSS}
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_scraper_counts_failures_instead_of_raising() -> None:
    with Scraper(f"127.0.0.1:{free_port()}", interval=0.02) as scraper:
        time.sleep(0.1)
    assert scraper.scrapes == []
    assert scraper.errors >= 2
    assert "failed" in scraper.last_error


def test_store_keeps_raw_series_per_cell(tmp_path) -> None:
    store = ResultStore(tmp_path / "store.sqlite")
    store.start_run("r", tmp_path, "2026-01-01T00:00:00+00:00", {})
    scrapes = cpu_scrapes(1.0, 0.0, [1.7e9, 1.7e9 + 0.25])
    series = series_frame(scrapes)
    store.add_result("r", {"run_id": "r", "cell": 0, "status": "ok"}, [1], series)
    store.add_result("r", {"run_id": "r", "cell": 1, "status": "failed"}, [], None)
    back = store.telemetry("r")
    assert list(back.columns) == ["cell", "time", "metric", "label", "value"]
    assert len(back) == len(series) == 12
    assert set(back["cell"]) == {0}
    assert (back["time"].to_numpy() == series["time"].to_numpy()).all()
    assert back["value"].tolist() == series["value"].tolist()
    store.close()
