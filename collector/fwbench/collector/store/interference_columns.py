"""The results table's columns of interference: what else used the agent's CPUs while its
cell was timed (docs/telemetry.md, "Interference"), and whether that was too much for the row
to stand in a verdict (run/interference.py). Empty on rows without telemetry and on rows of
agents whose runtime does not export the affinity series."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fwbench.collector.store.cell_key import clean
from fwbench.collector.store.columns_base import Column

# What a row whose interference could not be judged says, and why it could not be.
UNKNOWN = "interference unknown"
UNKNOWN_WHY = (
    "nothing measured whether other processes took the agent's CPUs while it was timed (its "
    "/metrics gave no fwbench_affinity_cpu_seconds_total, or --scrape-interval 0)"
)


def interference_unknown(row: Mapping[Any, Any]) -> bool:
    """An ok row whose interference could not be judged: it may have been interfered."""
    return row.get("status") == "ok" and clean(row.get("interfered")) is None


INTERFERENCE_COLUMNS: tuple[Column, ...] = (
    Column(
        "agent_cpus",
        "Int64",
        "Interference: CPUs the agent could run on (its affinity mask; a world's ranks' together)",
    ),
    Column(
        "others_cpu_percent",
        "Float64",
        "Interference: CPU time of every process other than the agent (and its world's ranks) "
        "on the agent's CPUs, percent of those CPUs' time, over the timed phase widened to at "
        "least 1 s around its middle",
    ),
    Column(
        "steal_percent",
        "Float64",
        "Interference: time the hypervisor gave the agent's CPUs to other guests (steal), "
        "percent of those CPUs' time over the same window",
    ),
    Column(
        "cpu_pressure_percent",
        "Float64",
        "Interference: share of the window in which some task of the host waited for a CPU "
        "(Linux PSI cpu, some); the agent's own threads count when they outnumber its CPUs",
    ),
    Column(
        "memory_pressure_percent",
        "Float64",
        "Interference: share of the window in which some task of the host waited for memory "
        "(Linux PSI memory, some)",
    ),
    Column(
        "cpu_frequency_mean_hertz",
        "Float64",
        "Interference: mean current frequency of the agent's CPUs over the window, where "
        "cpufreq is readable (most VMs do not expose it)",
    ),
    Column(
        "interfered",
        "boolean",
        "Interference: others_cpu_percent or steal_percent above the run's threshold "
        "(--interference-threshold, 10% by default): the row is kept and shown, marked, and "
        "no verdict is made from it; empty where it could not be measured",
    ),
    Column(
        "interference",
        "string",
        'Interference: why the row is interfered, in words ("other processes used 85% of '
        "the agent's 2 CPUs\"); empty when it is not",
    ),
)
