"""The agent's Prometheus exposition: process CPU by mode, memory (peak per workload, see
memory.py) and threads; host CPU by mode (iowait included) and available memory; GPUs through
NVML (gpu.py); what else ran on the agent's CPUs (hostload.py); identity; workload progress and
step durations.

Telemetry only: authoritative timings travel in RunResult. Names follow the Prometheus
guide (one `fwbench_` prefix, base units, `_total` counters, `_info` series of value 1 whose
labels carry the information), labels stay low-cardinality and never reuse a target label
(`agent`, `job`, `instance`), and the exposition passes `promtool check metrics` (tested).
Host series are what a lone agent can see; in a fleet, node_exporter is the better source."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psutil
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from fwbench.runtime.gpu import GpuCollector
from fwbench.runtime.hostload import HostLoadCollector
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
# /proc/stat's modes, as psutil names them. guest and guest_nice are left out: the kernel
# already counts them in user and nice, so adding them would count that time twice.
HOST_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def host_cpu_seconds(times: Any) -> dict[str, float]:
    """Seconds per mode, all CPUs together, from psutil.cpu_times(); modes this platform's
    psutil lacks (iowait, irq... outside Linux) are left out."""
    return {mode: float(getattr(times, mode)) for mode in HOST_CPU_MODES if hasattr(times, mode)}


class ResourceCollector(Collector):
    """Process CPU by mode and threads, host CPU by mode and memory, read at scrape time.

    cpu_times: the host CPU times reader (psutil.cpu_times; tests inject a fake)."""

    def __init__(self, cpu_times: Callable[[], Any] = psutil.cpu_times) -> None:
        self._process = psutil.Process()
        self._cpu_times = cpu_times

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
        host = self._host_cpu()
        if host is not None:
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

    def _host_cpu(self) -> CounterMetricFamily | None:
        """None where the host's times cannot be read (a sandbox hiding /proc/stat): one
        missing family must not fail the whole scrape."""
        try:
            seconds = host_cpu_seconds(self._cpu_times())
        except OSError:
            return None
        host = CounterMetricFamily(
            "fwbench_host_cpu_seconds",
            "CPU time of the host, all CPUs together, by mode",
            labels=["mode"],
        )
        for mode, value in seconds.items():
            host.add_metric([mode], value)
        return host


class WorkloadCollector(Collector):
    """fwbench_workload_running (0 or 1) and, only while a cell runs, fwbench_workload_info
    (value 1, the cell in its labels). Both come from one reference, read once per scrape
    (and replaced whole, never mutated), so a scrape never sees a cell without `running` 1 or
    the reverse."""

    def __init__(self) -> None:
        self._cell: dict[str, str] | None = None

    def start(self, labels: Mapping[str, str]) -> None:
        self._cell = dict(labels)

    def finish(self) -> None:
        self._cell = None

    def collect(self) -> Iterator[GaugeMetricFamily | InfoMetricFamily]:
        cell = self._cell
        yield GaugeMetricFamily(
            "fwbench_workload_running",
            "1 while a workload runs, else 0",
            value=int(cell is not None),
        )
        if cell is not None:  # an idle agent has no current cell: the series is absent
            yield InfoMetricFamily("fwbench_workload", "The workload cell running now", cell)


class AgentMetrics:
    """Metrics of one agent, in their own registry (so several agents fit one test process).

    identity: fwbench_agent_info's labels: the agent's name as `agent_name` (not `agent`, the
    scrape target's label in compose/prometheus/targets), framework, version...
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
        self.registry.register(ResourceCollector())
        self.registry.register(HostLoadCollector())
        self.workload = WorkloadCollector()
        self.registry.register(self.workload)
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
        self.workload.start(labels)

    def workload_finished(self, labels: Mapping[str, str], samples_ns: Sequence[int] = ()) -> None:
        self.workload.finish()
        histogram = self.steps.labels(workload=labels["workload"], phase=labels["phase"])
        for sample in samples_ns:
            histogram.observe(sample / 1e9)

    def serve(self, host: str, port: int) -> int:
        """Starts the /metrics HTTP server in a daemon thread; returns the bound port.

        prometheus_client's start_http_server, except that the serving thread sleeps until a
        request comes: its serve_forever polls twice a second for a shutdown this server never
        gets (it ends with the process), and each poll wakes the CPU a world's rank steps on."""
        family, _, _, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        server_class = type("_MetricsServer", (_ThreadingWSGIServer,), {"address_family": family})
        server: WSGIServer = make_server(
            str(address[0]), port, make_wsgi_app(self.registry), server_class, _QuietHandler
        )
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": None},
            name="fwbench-metrics",
            daemon=True,
        ).start()
        return int(server.server_port)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    """A thread a scrape, so that a slow scraper never holds up the next one."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log on the agent's stderr (a scrape every 0.25 s)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
