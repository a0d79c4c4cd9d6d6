"""The Grafana dashboards: the checked-in JSON is what compose/grafana/generate.py makes; every
panel, query and query variable reads the `$datasource` variable (no fixed uid); every selector
filters on the dashboard's variables; every PromQL expression parses (promtool, the real
Prometheus parser), names only metrics an agent really exposes, and runs on a real Prometheus
scraping real agents with the variables resolved there as Grafana resolves them."""

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
from prometheus_server import PROMETHEUS_DIR, label_values, query, query_until
from telemetry_agents import run_workload

from fwbench.runtime.gpu import GpuCollector

GRAFANA = Path(__file__).parents[2] / "compose" / "grafana"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Grafana's built-in variables, replaced by values a real query could have.
BUILTINS = {"__rate_interval": "8s", "__interval": "2s", "__range": "30m"}
# The matchers every selector of a dashboard carries.
FILTERS = {
    "fleet.json": ('job=~"$job"', 'instance=~"$instance"'),
    "agent.json": ('job=~"$job"', 'instance=~"$instance"', 'agent="$agent"'),
}
# Series Prometheus makes itself for every target, not scraped from an agent.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
# Series a test agent has no values for: no GPU here, and no cell runs while the test queries.
NO_DATA_HERE = re.compile(r"^fwbench_gpu_|^fwbench_workload_info$")
KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}
LABEL_VALUES = re.compile(r"^label_values\((.+), (\w+)\)$")


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def checked_in() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in (GRAFANA / "dashboards").glob("*.json")}


def regex_value(values: list[str]) -> str:
    """What Grafana puts in a Prometheus query for a multi-value or "All" selection: each
    value's regex metacharacters escaped (a backslash, doubled inside the PromQL string), the
    values joined into one alternation."""
    escaped = [re.sub(r"([\\$^*+?.()|{}\[\]])", r"\\\\\1", value) for value in values]
    return "(" + "|".join(escaped) + ")"


def substitute(text: str, values: dict[str, str]) -> str:
    """$name and ${name} replaced; a variable without a value raises KeyError."""
    table = {**BUILTINS, **values}
    return re.sub(r"\$\{?(\w+)\}?", lambda m: table[m.group(1)], text)


def compose_values() -> dict[str, str]:
    """The variables as Grafana sets them for the compose fleet: every job and instance
    ("All"), the first agent."""
    (job,) = re.findall(r"job_name: (\S+)", (PROMETHEUS_DIR / "prometheus.yml").read_text())
    groups = json.loads((PROMETHEUS_DIR / "targets" / "agents.json").read_text())
    instances = sorted(target for group in groups for target in group["targets"])
    agents = sorted(group["labels"]["agent"] for group in groups)
    return {"job": regex_value([job]), "instance": regex_value(instances), "agent": agents[0]}


def raw_expressions(board: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expression) of every query of every panel of one dashboard, as written."""
    return [
        (f"{board['uid']} {panel['title']!r} {target['refId']}", target["expr"])
        for panel in board["panels"]
        for target in panel["targets"]
    ]


def expressions(values: dict[str, str]) -> list[tuple[str, str]]:
    """(where, expression) of every query of every dashboard, variables substituted."""
    return [
        (where, substitute(expr, values))
        for _, board in sorted(checked_in().items())
        for where, expr in raw_expressions(board)
    ]


def query_variables(board: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    """(name, selector, label, multi-value) of each label_values variable, in order."""
    found = []
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(variable["query"]["query"])
            assert match, variable["query"]["query"]
            found.append((variable["name"], match[1], match[2], variable["includeAll"]))
    return found


def metric_occurrences(expr: str) -> list[str]:
    """Metric names in a PromQL expression, once per occurrence: identifiers that are not
    functions, keywords, label names (in braces or in by/without/on/ignoring/group_x lists)
    or strings."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    names = re.findall(r"(?<![\w.])([a-zA-Z_:][\w:]*)\b(?!\s*\()", expr)
    return [name for name in names if name not in KEYWORDS]


def metric_names(expr: str) -> set[str]:
    return set(metric_occurrences(expr))


def selectors(expr: str) -> list[str]:
    """Each metric's selector as written: the name and its braces, if any."""
    found = []
    for name in metric_names(expr):
        pattern = rf'(?<![\w:"]){re.escape(name)}(?![\w:])(?:\{{[^}}]*\}})?'
        found += re.findall(pattern, expr)
    assert len(found) == len(metric_occurrences(expr)), expr
    return found


def exposed_names(body: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(body) for s in f.samples}


@pytest.fixture(scope="module")
def exposed(agents) -> set[str]:
    """Every sample name a real agent's /metrics holds after a run, plus the GPU series of
    the fake NVML (this machine has no GPU, so gpu.py's collector on two fake devices stands
    in for what a GPU agent exposes), plus fwbench_workload_info, which an agent exposes only
    while a cell runs (tests/runtime/test_metrics.py checks it)."""
    run_workload(agents[0])  # a run fills the workload series
    url = f"http://127.0.0.1:{agents[0].metrics_port}/metrics"
    names = exposed_names(urllib.request.urlopen(url, timeout=5).read().decode())
    registry = CollectorRegistry()
    registry.register(GpuCollector(two_gpus()))
    return names | exposed_names(generate_latest(registry).decode()) | {"fwbench_workload_info"}


def test_checked_in_dashboards_are_what_generate_py_makes():
    generator = load_generator()
    made = {
        name: json.loads(generator.render(board)) for name, board in generator.dashboards().items()
    }
    assert made == checked_in(), "stale: run `python compose/grafana/generate.py`"
    for name, board in generator.dashboards().items():
        assert (GRAFANA / "dashboards" / name).read_text() == generator.render(board)


def test_every_panel_query_and_variable_reads_the_datasource_variable():
    for name, board in checked_in().items():
        variables = board["templating"]["list"]
        first = variables[0]
        assert (first["name"], first["type"], first["query"]) == (
            "datasource",
            "datasource",
            "prometheus",
        ), name
        assert "fwbench-prometheus" not in json.dumps(board), f"{name}: a fixed datasource uid"
        for panel in board["panels"]:
            assert panel["datasource"] == DATASOURCE, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == DATASOURCE, panel["title"]
        for variable in variables[1:]:
            assert variable["datasource"] == DATASOURCE, variable["name"]


def test_the_provisioned_datasource_is_the_default_prometheus():
    """A datasource variable starts at the default datasource of its type: in the compose
    fleet, the provisioned Prometheus."""
    provisioned = (GRAFANA / "provisioning/datasources/prometheus.yml").read_text()
    assert re.findall(r"^\s*type: (\S+)$", provisioned, re.MULTILINE) == ["prometheus"]
    assert re.findall(r"^\s*isDefault: (\S+)$", provisioned, re.MULTILINE) == ["true"]


def test_every_selector_filters_on_the_dashboard_variables():
    for name, board in checked_in().items():
        expected = {v["name"] for v in board["templating"]["list"]} - {"datasource"}
        assert expected == {f.split("=")[0] for f in FILTERS[name]}, name
        for where, expr in raw_expressions(board):
            for selector in selectors(expr):
                missing = [f for f in FILTERS[name] if f not in selector]
                assert not missing, f"{where}: {selector} lacks {missing}"


def test_variables_chain_on_target_labels():
    """job, then instance within the jobs, then agent within both: each query variable
    filters on the target variables before it and reads a target label."""
    for name, board in checked_in().items():
        earlier: set[str] = set()
        for variable, selector, label, _ in query_variables(board):
            used = set(re.findall(r"\$(\w+)", selector))
            assert used == earlier & {"job", "instance"}, (name, variable, selector)
            assert label == variable and label in {"job", "instance", "agent"}
            earlier.add(variable)


def test_every_dashboard_expression_parses(tmp_path):
    """promtool parses each expression as a recording rule's; one rule per query."""
    rules = [
        {"record": f"fwbench_dashboard_query_{i}", "expr": expr}
        for i, (_, expr) in enumerate(expressions(compose_values()))
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
    for where, expr in expressions(compose_values()):
        names = metric_names(expr)
        assert names, f"{where}: no metric found in {expr}"
        assert names <= exposed | SYNTHETIC, f"{where}: {sorted(names - exposed)} not exposed"


def test_query_variables_read_exposed_metrics(exposed):
    for board in checked_in().values():
        for _, selector, _, _ in query_variables(board):
            (metric,) = metric_names(selector)
            assert metric in exposed | SYNTHETIC


def resolve_variables(url: str, board: dict[str, Any]) -> dict[str, list[str]]:
    """Each query variable's values from the real Prometheus, earlier ones substituted as
    Grafana does ("All" for multi-value ones, else the first value)."""
    found: dict[str, list[str]] = {}
    values: dict[str, str] = {}
    for name, selector, label, multi in query_variables(board):
        found[name] = label_values(url, label, substitute(selector, values))
        assert found[name], f"{board['uid']}: ${name} has no values"
        values[name] = regex_value(found[name]) if multi else found[name][0]
    return found


def test_every_dashboard_expression_runs_on_real_prometheus(prometheus, agents):
    """Variables resolved on a real Prometheus scraping the agents, then every expression
    queried there: each succeeds, and each has data unless it reads GPU series (no GPU here) or
    the running cell (none runs now)."""
    for agent in agents:
        run_workload(agent)
    query_until(prometheus, "fwbench_agent_info", len(agents))
    for _, board in sorted(checked_in().items()):
        found = resolve_variables(prometheus, board)
        assert found["job"] == ["fwbench-agents"]
        assert found["instance"] == sorted(f"127.0.0.1:{a.metrics_port}" for a in agents)
        if "agent" in found:
            assert found["agent"] == sorted(a.name for a in agents)
        values = {
            "job": regex_value(found["job"]),
            "instance": regex_value(found["instance"]),
            "agent": found.get("agent", [""])[0],
        }
        for where, expr in raw_expressions(board):
            expr = substitute(expr, values)
            if any(NO_DATA_HERE.search(name) for name in metric_names(expr)):
                query(prometheus, expr)  # valid, empty
            else:
                assert query_until(prometheus, expr, 1), where


def test_metric_names_finds_metrics_not_functions_or_labels():
    expr = (
        'histogram_quantile(0.95, sum by (le, workload) (rate(x_bucket{agent="a", le!="1"}'
        "[8s]))) / on(agent) group_left(mode) y_total offset 5m > bool 1e3"
    )
    assert metric_names(expr) == {"x_bucket", "y_total"}
    assert sorted(selectors(expr)) == ['x_bucket{agent="a", le!="1"}', "y_total"]


def test_regex_value_escapes_like_grafana():
    assert regex_value(["fwbench-agents"]) == "(fwbench-agents)"
    assert regex_value(["127.0.0.1:9101", "a|b"]) == r"(127\\.0\\.0\\.1:9101|a\\|b)"
