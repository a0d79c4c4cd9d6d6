"""Writes the fwbench Grafana dashboards, dashboards/*.json, from the panel lists below.

Run `python compose/grafana/generate.py` after editing this file and check in its output;
tests/telemetry/test_dashboards.py fails while the JSON is stale, and checks that every
expression parses, names only metrics an agent exposes and runs on a real Prometheus with
the variables resolved there. No Grafana library: a dashboard
is plain JSON, and Grafana fills in what is left out.

Like node-exporter's and dcgm-exporter's dashboards, these work on any Grafana and Prometheus:
every panel, query and query variable reads the datasource variable `$datasource` (any
Prometheus; the provisioned default at first), never a fixed uid, and every selector filters
on the variables `$job` and `$instance` (and `$agent` on the agent dashboard), so agents
scraped under another job, or beside other exporters, show up and nothing else does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DASHBOARDS = Path(__file__).parent / "dashboards"
# Label matchers of every selector: the targets chosen in the variables (regular expressions,
# as multi-value and "All" selections are), and on the agent dashboard the one agent.
TARGET = 'job=~"$job", instance=~"$instance"'
AGENT = f'{TARGET}, agent="$agent"'
RATE = "[$__rate_interval]"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class Panel:
    title: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # timeseries, stat, bargauge or table
    width: int = 12
    height: int = 8
    description: str = ""
    stacked: bool = False
    mappings: tuple[dict[str, Any], ...] = ()


def up_down(down: str, up: str) -> dict[str, Any]:
    """A value mapping: 0 and 1 shown as words, red and green."""
    return {
        "type": "value",
        "options": {
            "0": {"text": down, "color": "red", "index": 0},
            "1": {"text": up, "color": "green", "index": 1},
        },
    }


def quantile(q: float, selector: str) -> Query:
    by = "sum by (le, workload, phase)"
    return Query(
        f"histogram_quantile({q}, {by} (rate(fwbench_workload_step_duration_seconds_bucket"
        f"{{{selector}}}{RATE})))",
        f"{{{{workload}}}} {{{{phase}}}} p{round(q * 100)}",
    )


FLEET = (
    Panel(
        "Agents up",
        (Query(f"up{{{TARGET}}}", "{{agent}}"),),
        kind="stat",
        height=5,
        description="Whether Prometheus reached each agent's /metrics at the last scrape.",
        mappings=(up_down("down", "up"),),
    ),
    Panel(
        "Running a workload",
        (Query(f"fwbench_workload_running{{{TARGET}}}", "{{agent}}"),),
        kind="stat",
        height=5,
        mappings=(up_down("idle", "running"),),
    ),
    Panel(
        "Workload running now, per agent (idle agents have none)",
        (Query(f"fwbench_workload_info{{{TARGET}}}", instant=True),),
        kind="table",
        width=24,
        height=6,
    ),
    Panel(
        "Runs since agent start, by status",
        (
            Query(
                f"sum by (agent, status) (fwbench_workload_runs_total{{{TARGET}}})",
                "{{agent}} {{status}}",
            ),
        ),
        kind="bargauge",
        description="Counters since each agent started (an agent restart sets them to 0).",
    ),
    Panel(
        "Throughput: iterations per second, all stages",
        (
            Query(
                f"sum by (agent) (rate(fwbench_workload_iterations_total{{{TARGET}}}{RATE}))",
                "{{agent}}",
            ),
        ),
        unit="ops",
        description="Steps per second; items per second is this times the batch size "
        "(the results table has both, from the authoritative timings).",
    ),
    Panel(
        "Agent CPU (cores busy)",
        (
            Query(
                f"sum by (agent) (rate(fwbench_process_cpu_seconds_total{{{TARGET}}}{RATE}))",
                "{{agent}}",
            ),
        ),
    ),
    Panel(
        "Agent resident memory",
        (Query(f"process_resident_memory_bytes{{{TARGET}}}", "{{agent}}"),),
        unit="bytes",
    ),
    Panel(
        "GPU power",
        (Query(f"fwbench_gpu_power_watts{{{TARGET}}}", "{{agent}} GPU {{gpu}}"),),
        unit="watt",
        description="Agents on one host see the same GPUs: each is shown once per agent.",
    ),
)

AGENT_PANELS = (
    Panel(
        "Identity",
        (Query(f"fwbench_agent_info{{{AGENT}}}", instant=True),),
        kind="table",
        height=5,
    ),
    Panel(
        "Workload running now (empty while the agent is idle)",
        (Query(f"fwbench_workload_info{{{AGENT}}}", instant=True),),
        kind="table",
        height=5,
    ),
    Panel(
        "Process CPU by mode (cores)",
        (
            Query(
                f"sum by (mode) (rate(fwbench_process_cpu_seconds_total{{{AGENT}}}{RATE}))",
                "{{mode}}",
            ),
        ),
        stacked=True,
    ),
    Panel(
        "Host CPU by mode (cores; idle left out, iowait shown)",
        (
            Query(
                "sum by (mode) (rate(fwbench_host_cpu_seconds_total"
                f'{{{AGENT}, mode!="idle"}}{RATE}))',
                "{{mode}}",
            ),
        ),
        stacked=True,
        description="The whole host as the agent sees it (/proc/stat): other agents and "
        "processes included. In a fleet, node_exporter is the better source.",
    ),
    Panel(
        "Others on the agent's CPUs (share of them; interference)",
        (
            Query(
                "clamp_min(sum(rate(fwbench_affinity_cpu_seconds_total"
                f'{{{AGENT}, mode=~"user|nice|system|irq|softirq"}}{RATE}))'
                f" - sum(rate(fwbench_process_cpu_seconds_total{{{AGENT}}}{RATE})), 0)"
                f" / sum(rate(fwbench_affinity_cpu_seconds_total{{{AGENT}}}{RATE}))",
                "other processes",
            ),
            Query(
                "sum(rate(fwbench_affinity_cpu_seconds_total"
                f'{{{AGENT}, mode="steal"}}{RATE}))'
                f" / sum(rate(fwbench_affinity_cpu_seconds_total{{{AGENT}}}{RATE}))",
                "steal",
            ),
            Query(
                f"rate(fwbench_host_pressure_cpu_waiting_seconds_total{{{AGENT}}}{RATE})",
                "CPU pressure (host, some)",
            ),
        ),
        unit="percentunit",
        description="What the collector's others_cpu_percent measures per cell "
        "(docs/telemetry.md, Interference): busy time of the agent's CPUs less the agent's "
        "own, as a share of those CPUs; above 10% during a cell, its row is interfered.",
    ),
    Panel(
        "Memory",
        (
            Query(f"process_resident_memory_bytes{{{AGENT}}}", "RSS"),
            Query(f"fwbench_process_resident_memory_peak_bytes{{{AGENT}}}", "peak RSS"),
            Query(f"fwbench_host_memory_available_bytes{{{AGENT}}}", "host available"),
        ),
        unit="bytes",
        description="Peak RSS restarts at each workload start where the kernel allows "
        "(fwbench_process_resident_memory_peak_start_time_seconds says since when).",
    ),
    Panel("Threads", (Query(f"fwbench_process_threads{{{AGENT}}}", "threads"),)),
    Panel(
        "Iterations per second, all stages",
        (
            Query(
                "sum by (workload, phase) "
                f"(rate(fwbench_workload_iterations_total{{{AGENT}}}{RATE}))",
                "{{workload}} {{phase}}",
            ),
        ),
        unit="ops",
    ),
    Panel(
        "Step latency p50 and p95 (timed steps)",
        (quantile(0.5, AGENT), quantile(0.95, AGENT)),
        unit="s",
        description="From the step histogram, observed when a run's timed loop ends, so "
        "points appear as runs finish. Telemetry only: the results table's statistics come "
        "from every raw sample.",
    ),
    Panel(
        "GPU utilisation",
        (Query(f"fwbench_gpu_utilization_ratio{{{AGENT}}}", "GPU {{gpu}}"),),
        unit="percentunit",
    ),
    Panel(
        "GPU memory",
        (
            Query(f"fwbench_gpu_memory_used_bytes{{{AGENT}}}", "GPU {{gpu}} used"),
            Query(f"fwbench_gpu_memory_total_bytes{{{AGENT}}}", "GPU {{gpu}} total"),
        ),
        unit="bytes",
    ),
    Panel(
        "GPU power",
        (Query(f"fwbench_gpu_power_watts{{{AGENT}}}", "GPU {{gpu}}"),),
        unit="watt",
    ),
    Panel(
        "GPU energy in the time range",
        (
            Query(
                f"increase(fwbench_gpu_energy_joules_total{{{AGENT}}}[$__range])",
                "GPU {{gpu}}",
                instant=True,
            ),
        ),
        unit="joule",
        kind="stat",
        description="Absent for GPUs without NVML's energy counter (before Volta).",
    ),
    Panel(
        "GPU SM clock",
        (Query(f"fwbench_gpu_sm_clock_hertz{{{AGENT}}}", "GPU {{gpu}}"),),
        unit="hertz",
    ),
    Panel(
        "GPU temperature",
        (Query(f"fwbench_gpu_temperature_celsius{{{AGENT}}}", "GPU {{gpu}}"),),
        unit="celsius",
    ),
)

DATASOURCE_VARIABLE = {
    "name": "datasource",
    "label": "Data source",
    "type": "datasource",
    "query": "prometheus",
    "current": {},  # empty: Grafana's default Prometheus (the provisioned one in compose)
    "hide": 0,
    "refresh": 1,
    "regex": "",
    "multi": False,
    "includeAll": False,
}


def query_variable(name: str, label: str, query: str, multi: bool) -> dict[str, Any]:
    """A variable filled from label_values(...), refreshed when the time range changes;
    multi-value ones start at "All" (every value found, as a regular expression)."""
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": name},
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]} if multi else {},
        "hide": 0,
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "multi": multi,
        "includeAll": multi,
    }


# Jobs that scrape fwbench agents (those that have answered once), then their targets: from
# `up`, so an agent that is down is still listed (and shown down on the fleet dashboard).
TARGET_VARIABLES = [
    DATASOURCE_VARIABLE,
    query_variable("job", "Job", "label_values(fwbench_agent_info, job)", multi=True),
    query_variable("instance", "Instance", 'label_values(up{job=~"$job"}, instance)', multi=True),
]
AGENT_VARIABLE = query_variable(
    "agent", "Agent", f"label_values(fwbench_agent_info{{{TARGET}}}, agent)", multi=False
)


def target_json(query: Query, ref_id: str, kind: str) -> dict[str, Any]:
    target = {
        "datasource": DATASOURCE,
        "refId": ref_id,
        "expr": query.expr,
        "legendFormat": query.legend,
        "instant": query.instant,
        "range": not query.instant,
    }
    return {**target, "format": "table"} if kind == "table" else target


def options_json(panel: Panel) -> dict[str, Any]:
    reduce = {"calcs": ["lastNotNull"], "fields": "", "values": False}
    if panel.kind == "stat":
        return {"reduceOptions": reduce, "colorMode": "background", "graphMode": "none"}
    if panel.kind == "bargauge":
        return {"reduceOptions": reduce, "displayMode": "basic", "orientation": "horizontal"}
    if panel.kind == "table":
        return {"showHeader": True}
    legend = {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}
    return {"legend": legend, "tooltip": {"mode": "multi", "sort": "desc"}}


def panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    defaults: dict[str, Any] = {"unit": panel.unit, "mappings": list(panel.mappings)}
    if panel.stacked:
        defaults["custom"] = {"stacking": {"mode": "normal", "group": "A"}, "fillOpacity": 30}
    hidden = {"Time": True, "__name__": True, "job": True, "instance": True}
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": panel.height, "w": panel.width, "x": x, "y": y},
        "targets": [
            target_json(query, chr(ord("A") + i), panel.kind)
            for i, query in enumerate(panel.queries)
        ],
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": options_json(panel),
        "transformations": (
            [{"id": "organize", "options": {"excludeByName": hidden}}]
            if panel.kind == "table"
            else []
        ),
    }


def layout(panels: tuple[Panel, ...]) -> list[dict[str, Any]]:
    """Left to right in Grafana's 24-column grid, a new row when one is full."""
    placed: list[dict[str, Any]] = []
    x, y, row_height = 0, 0, 0
    for panel_id, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        placed.append(panel_json(panel, panel_id, x, y))
        x, row_height = x + panel.width, max(row_height, panel.height)
    return placed


def dashboard(
    uid: str, title: str, panels: tuple[Panel, ...], variables: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "uid": uid,
        "title": title,
        "tags": ["fwbench"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "refresh": "5s",
        "time": {"from": "now-30m", "to": "now"},
        "links": [{"type": "dashboards", "tags": ["fwbench"], "title": "fwbench dashboards"}],
        "annotations": {"list": []},
        "templating": {"list": variables},
        "panels": layout(panels),
    }


def dashboards() -> dict[str, dict[str, Any]]:
    """File name -> dashboard JSON object."""
    return {
        "fleet.json": dashboard("fwbench-fleet", "fwbench fleet", FLEET, TARGET_VARIABLES),
        "agent.json": dashboard(
            "fwbench-agent", "fwbench agent", AGENT_PANELS, [*TARGET_VARIABLES, AGENT_VARIABLE]
        ),
    }


def render(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2) + "\n"


def main() -> None:
    DASHBOARDS.mkdir(exist_ok=True)
    for name, board in dashboards().items():
        (DASHBOARDS / name).write_text(render(board))


if __name__ == "__main__":
    main()
