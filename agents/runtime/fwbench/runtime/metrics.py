"""The agent's Prometheus exposition: process CPU by mode, memory (peak per workload, see
memory.py) and threads; host CPU by mode (iowait included) and available memory; GPUs through
NVML (gpu.py); identity; workload progress and step durations.

Telemetry only: authoritative timings travel in RunResult. Names follow the Prometheus
guide (one `fwbench_` prefix, base units, `_total` counters, `_info` identity), labels stay
low-cardinality, and the exposition passes `promtool check metrics` (tested). Host series are
what a lone agent can see; in a fleet, node_exporter is the better source for the host."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence

import psutil
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from fwbench.runtime.gpu import GpuCollector
from fwbench.runtime.memory import ProcessMemoryCollector

# Step durations from 1 us to 100 s, five buckets per decade: fine enough to tell a 0.2 ms
# LeNet step from a 0.3 ms one, and a 60 ms GEMM from a 100 ms one.
STEP_BUCKETS: tuple[float, ...] = (
    *(
        round(mantissa * 10.0**exponent, 12)
        for exponent in range(-6, 2)
        for mantissa in (1.0, 1.6, 2.5, 4.0, 6.3)
    ),
    100.0,
)
HOST_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def host_cpu_seconds(stat_text: str, ticks_per_second: float) -> dict[str, float]:
    """Seconds per mode, all CPUs together, from the first line of /proc/stat."""
    fields = stat_text.splitlines()[0].split()
    if fields[0] != "cpu":
        raise ValueError("unexpected /proc/stat format")
    values = [float(v) / ticks_per_second for v in fields[1 : 1 + len(HOST_CPU_MODES)]]
    return dict(zip(HOST_CPU_MODES, values, strict=False))


class ResourceCollector(Collector):
    """Process CPU by mode and threads, host CPU by mode and memory, read at scrape time."""

    def __init__(self, stat_path: str = "/proc/stat") -> None:
        self._process = psutil.Process()
        self._stat_path = stat_path
        self._ticks = float(os.sysconf("SC_CLK_TCK"))

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        times = self._process.cpu_times()
        cpu = CounterMetricFamily(
            "fwbench_process_cpu_seconds",
            "CPU time of the agent process by mode",
            labels=["mode"],
        )
        cpu.add_metric(["user"], times.user + times.children_user)
        cpu.add_metric(["system"], times.system + times.children_system)
        yield cpu
        threads = GaugeMetricFamily("fwbench_process_threads", "Threads of the agent process")
        threads.add_metric([], self._process.num_threads())
        yield threads
        try:
            with open(self._stat_path) as stat:
                seconds = host_cpu_seconds(stat.read(), self._ticks)
        except (OSError, ValueError):
            seconds = {}
        if seconds:
            host = CounterMetricFamily(
                "fwbench_host_cpu_seconds",
                "CPU time of the host, all CPUs together, by mode (/proc/stat)",
                labels=["mode"],
            )
            for mode, value in seconds.items():
                host.add_metric([mode], value)
            yield host
        memory = psutil.virtual_memory()
        yield GaugeMetricFamily(
            "fwbench_host_memory_available_bytes",
            "Memory available to new processes on the host",
            value=memory.available,
        )
        yield GaugeMetricFamily(
            "fwbench_host_memory_total_bytes", "Physical memory of the host", value=memory.total
        )


class AgentMetrics:
    """Metrics of one agent, in their own registry (so several agents fit one test process).

    gpu: the GPU collector to register; None makes one on the real NVML (tests pass a fake)."""

    def __init__(self, identity: Mapping[str, str], gpu: GpuCollector | None = None) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        Info("fwbench_agent", "Identity of this agent", registry=self.registry).info(dict(identity))
        self.memory = ProcessMemoryCollector()
        self.registry.register(self.memory)
        self.registry.register(gpu or GpuCollector())
        self.iterations = Counter(
            "fwbench_workload_iterations",
            "Workload iterations completed, all stages",
            ["workload", "phase"],
            registry=self.registry,
        )
        self.runs = Counter(
            "fwbench_workload_runs",
            "Workload runs finished, by outcome",
            ["status"],
            registry=self.registry,
        )
        self.running = Gauge(
            "fwbench_workload_running",
            "1 while a workload runs, else 0",
            registry=self.registry,
        )
        self.registry.register(ResourceCollector())
        self.workload = Gauge(
            "fwbench_workload_info",
            "The workload cell running now (one series, 1) or last run (0)",
            ["workload", "phase", "mode", "dtype", "batch_size"],
            registry=self.registry,
        )
        self.steps = Histogram(
            "fwbench_workload_step_duration_seconds",
            "Timed step durations of finished runs (observed after the timed loop, so that "
            "observing cannot slow the loop down)",
            ["workload", "phase"],
            buckets=STEP_BUCKETS,
            registry=self.registry,
        )

    def workload_started(self, labels: Mapping[str, str]) -> None:
        self.memory.reset_peak()  # the peak gauge then covers this workload only
        self.workload.clear()  # one current cell: label values change per cell
        self.workload.labels(**labels).set(1)
        self.running.set(1)

    def workload_finished(self, labels: Mapping[str, str], samples_ns: Sequence[int] = ()) -> None:
        self.workload.labels(**labels).set(0)
        self.running.set(0)
        histogram = self.steps.labels(workload=labels["workload"], phase=labels["phase"])
        for sample in samples_ns:
            histogram.observe(sample / 1e9)

    def serve(self, host: str, port: int) -> int:
        """Starts the /metrics HTTP server in a daemon thread; returns the bound port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)
