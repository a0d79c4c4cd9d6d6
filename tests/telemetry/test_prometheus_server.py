"""The compose fleet's Prometheus configuration, checked by promtool and run for real: a
Prometheus server (Debian's prometheus package, see prometheus_server.py) scrapes two real agent
processes with the scrape settings of compose/prometheus/prometheus.yml."""

from __future__ import annotations

import json
import subprocess
import urllib.parse

from prometheus_server import PROMETHEUS_DIR, get_json, query, query_until
from telemetry_agents import TIMED_ITERATIONS, run_workload

from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs


def test_compose_prometheus_config_passes_promtool():
    checked = subprocess.run(
        ["promtool", "check", "config", str(PROMETHEUS_DIR / "prometheus.yml")],
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_compose_targets_use_each_agents_manifest_metrics_port():
    manifests = discover_manifests(manifest_dirs())
    groups = json.loads((PROMETHEUS_DIR / "targets" / "agents.json").read_text())
    for group in groups:
        name = group["labels"]["agent"]
        assert group["targets"] == [f"{name}:{manifests[name].metrics_port}"], name


def test_prometheus_scrapes_every_agent_with_its_agent_label(prometheus, agents):
    run_workload(agents[0])
    names = {a.name for a in agents}
    up = query_until(prometheus, 'up{job="fwbench-agents"} == 1', len(agents))
    assert {s["metric"]["agent"] for s in up} == names
    series = get_json(
        f"{prometheus}/api/v1/series?"
        + urllib.parse.urlencode({"match[]": "fwbench_process_cpu_seconds_total"})
    )["data"]
    assert {s["agent"] for s in series} == names
    assert {s["mode"] for s in series} == {"user", "system"}
    info = query(prometheus, "fwbench_agent_info")
    assert {s["metric"]["agent"] for s in info} == names
    # The agent names itself in agent_name: no clash with the target's label, no relabelling.
    assert all(s["metric"]["agent_name"] == s["metric"]["agent"] for s in info)
    assert not any("exported_agent" in s["metric"] for s in info)


def test_prometheus_holds_the_workload_run_of_one_agent(prometheus, agents):
    run_workload(agents[1])
    (runs,) = query_until(prometheus, f'fwbench_workload_runs_total{{agent="{agents[1].name}"}}', 1)
    assert runs["metric"]["status"] == "ok" and float(runs["value"][1]) >= 1
    count = query_until(
        prometheus, f'fwbench_workload_step_duration_seconds_count{{agent="{agents[1].name}"}}', 1
    )
    assert float(count[0]["value"][1]) % TIMED_ITERATIONS == 0
    buckets = query(prometheus, "fwbench_workload_step_duration_seconds_bucket")
    assert agents[1].name in {s["metric"]["agent"] for s in buckets}
    quantile = query(
        prometheus,
        "histogram_quantile(0.5, sum by (le, agent) "
        "(fwbench_workload_step_duration_seconds_bucket))",
    )
    assert all(float(s["value"][1]) > 0.0002 for s in quantile)  # 200 us steps
