"""The agent's Prometheus exposition: process CPU and memory, identity, workload counters.

Telemetry only: authoritative timings travel in RunResult. Names follow the Prometheus
guide (one `fwbench_` prefix, base units, `_total` counters, `_info` identity)."""

from __future__ import annotations

import resource
from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)


def _peak_rss_bytes() -> float:
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)  # Linux: KiB


class AgentMetrics:
    """Metrics of one agent, in their own registry (so several agents fit one test process)."""

    def __init__(self, identity: Mapping[str, str]) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        Info("fwbench_agent", "Identity of this agent", registry=self.registry).info(dict(identity))
        peak = Gauge(
            "fwbench_process_peak_resident_memory_bytes",
            "Peak resident set size of the agent process since it started",
            registry=self.registry,
        )
        peak.set_function(_peak_rss_bytes)
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

    def serve(self, host: str, port: int) -> int:
        """Starts the /metrics HTTP server in a daemon thread; returns the bound port."""
        server, _thread = start_http_server(port, addr=host, registry=self.registry)
        return int(server.server_port)
