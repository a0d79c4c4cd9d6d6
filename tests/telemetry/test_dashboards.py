"""The Grafana dashboards: the checked-in JSON is what compose/grafana/generate.py makes,
every panel names the provisioned datasource, every PromQL expression parses (promtool, the
real Prometheus parser) and names only metrics an agent really exposes."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from fake_nvml import two_gpus
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from telemetry_agents import run_workload

from fwbench.runtime.gpu import GpuCollector

GRAFANA = Path(__file__).parents[2] / "compose" / "grafana"
UID = "fwbench-prometheus"
# Grafana's template variables, replaced by values a real query could have.
VARIABLES = {
    "$__rate_interval": "8s",
    "$__interval": "2s",
    "$__range": "30m",
    "${agent}": "fake-a",
    "$agent": "fake-a",
}
# Series Prometheus makes itself for every target, not scraped from an agent.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def checked_in() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in (GRAFANA / "dashboards").glob("*.json")}


def expressions() -> list[tuple[str, str]]:
    """(where, expression) of every query of every panel, variables substituted."""
    found = []
    for name, board in sorted(checked_in().items()):
        for panel in board["panels"]:
            for target in panel["targets"]:
                expr = target["expr"]
                for variable, value in VARIABLES.items():
                    expr = expr.replace(variable, value)
                found.append((f"{name} {panel['title']!r} {target['refId']}", expr))
    return found


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: identifiers that are not functions, keywords,
    label names (in braces or in by/without/on/ignoring/group_x lists) or strings."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = set(re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr))
    return names - KEYWORDS


def exposed_names(body: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(body) for s in f.samples}


@pytest.fixture(scope="module")
def exposed(agents) -> set[str]:
    """Every sample name a real agent's /metrics holds after a run, plus the GPU series of
    the fake NVML: this machine has no GPU, so gpu.py's collector on two fake devices stands
    in for what a GPU agent exposes."""
    run_workload(agents[0])  # a run fills the workload series
    url = f"http://127.0.0.1:{agents[0].metrics_port}/metrics"
    names = exposed_names(urllib.request.urlopen(url, timeout=5).read().decode())
    registry = CollectorRegistry()
    registry.register(GpuCollector(two_gpus()))
    return names | exposed_names(generate_latest(registry).decode())


def test_checked_in_dashboards_are_what_generate_py_makes():
    generator = load_generator()
    made = {
        name: json.loads(generator.render(board)) for name, board in generator.dashboards().items()
    }
    assert made == checked_in(), "stale: run `python compose/grafana/generate.py`"
    for name, board in generator.dashboards().items():
        assert (GRAFANA / "dashboards" / name).read_text() == generator.render(board)


def test_every_panel_query_and_variable_names_the_provisioned_datasource():
    provisioned = (GRAFANA / "provisioning/datasources/prometheus.yml").read_text()
    assert re.findall(r"^\s*uid: (\S+)$", provisioned, re.MULTILINE) == [UID]
    for board in checked_in().values():
        for panel in board["panels"]:
            assert panel["datasource"] == {"type": "prometheus", "uid": UID}, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == UID, panel["title"]
        for variable in board["templating"]["list"]:
            assert variable["datasource"]["uid"] == UID


def test_every_dashboard_expression_parses(tmp_path):
    """promtool parses each expression as a recording rule's; one rule per query."""
    rules = [
        {"record": f"fwbench_dashboard_query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(expressions())
    ]
    assert all("$" not in rule["expr"] for rule in rules), "a template variable is left"
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}))
    checked = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rules)} rules found" in checked.stdout


def test_every_dashboard_expression_names_only_exposed_metrics(exposed):
    for where, expr in expressions():
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr}"
        assert names <= exposed | SYNTHETIC, f"{where}: {sorted(names - exposed)} not exposed"


def test_agent_variable_reads_an_exposed_metric(exposed):
    for board in checked_in().values():
        for variable in board["templating"]["list"]:
            (metric,) = re.findall(r"label_values\((\w+),", variable["query"]["query"])
            assert metric in exposed


def test_metric_names_finds_metrics_not_functions_or_labels():
    expr = (
        'histogram_quantile(0.95, sum by (le, workload) (rate(x_bucket{agent="a", le!="1"}'
        "[8s]))) / on(agent) group_left(mode) y_total offset 5m > bool 1e3"
    )
    assert metric_names(expr) == {"x_bucket", "y_total"}
