"""What else used an agent's CPUs while a cell was timed, from the scrapes of its /metrics
(docs/telemetry.md, "Interference"): the arithmetic behind the interference columns, for one
agent (cpu_load) and for an agent or a world's ranks together (load_columns).
run/interference.py judges the result."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fwbench.collector.run.scrapes import Scrape, Window, mean

# Interference is judged over the timed phase widened to at least this long around its middle:
# /proc/stat counts in ticks of 10 ms per CPU, so over a shorter window a few ticks either way
# would read as several percent of the CPUs.
INTERFERENCE_WINDOW_SECONDS = 1.0
# Busy modes of /proc/stat: what some process (or the kernel for one) ran. Idle and iowait are
# nobody's, steal is the hypervisor's (its own column).
BUSY_MODES = ("user", "nice", "system", "irq", "softirq")
INTERFERENCE_COLUMNS = (
    "agent_cpus",
    "others_cpu_percent",
    "steal_percent",
    "cpu_pressure_percent",
    "memory_pressure_percent",
    "cpu_frequency_mean_hertz",
)


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
    window = Window(scrapes, middle - half, middle + half)
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
        frequency=mean(window.gauge(("fwbench_affinity_cpu_frequency_hertz", ""))),
    )


def load_columns(loads: Sequence[CpuLoad]) -> dict[str, Any]:
    """The interference columns of one agent's, or a world's ranks', CPU loads. Ranks that read
    one kernel's /proc/stat for the same CPUs share them: their busy time is counted once and
    all their own CPU time taken from it; ranks on other CPUs or kernels add theirs."""
    columns: dict[str, Any] = {
        "agent_cpus": None,
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
    columns["cpu_frequency_mean_hertz"] = mean(
        [load.frequency for load in loads if not math.isnan(load.frequency)]
    )
    return columns
