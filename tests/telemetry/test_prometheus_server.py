"""The compose fleet's Prometheus configuration, checked by promtool and run for real: a
Prometheus server (Debian's prometheus package) scrapes two real agent processes with the
scrape settings of compose/prometheus/prometheus.yml, copied verbatim, and only its targets
file swapped for the agents' loopback ports."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from telemetry_agents import TIMED_ITERATIONS, run_workload

from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs

PROMETHEUS_DIR = Path(__file__).parents[2] / "compose" / "prometheus"
PROMETHEUS = "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture(scope="module")
def prometheus(agents, tmp_path_factory) -> Iterator[str]:
    """A Prometheus server scraping the agents; yields its base URL; always killed."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus missing: `make system-deps` installs Debian's prometheus package")
    folder = tmp_path_factory.mktemp("prometheus")
    shutil.copy(PROMETHEUS_DIR / "prometheus.yml", folder / "prometheus.yml")
    (folder / "targets").mkdir()
    targets = [
        {"targets": [f"127.0.0.1:{a.metrics_port}"], "labels": {"agent": a.name}} for a in agents
    ]
    (folder / "targets" / "agents.json").write_text(json.dumps(targets))
    port = free_port()
    with open(folder / "prometheus.log", "wb") as log:
        server = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={folder / 'prometheus.yml'}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, server, folder / "prometheus.log")
        yield url
    finally:
        server.kill()
        server.wait(10)


def wait_ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"prometheus exited {server.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"prometheus not ready in 20 s:\n{log.read_text()[-3000:]}")


def query(url: str, expr: str) -> list[dict[str, Any]]:
    body = get_json(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
    assert body["status"] == "success", body
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def query_until(url: str, expr: str, count: int, timeout: float = 15) -> list[dict[str, Any]]:
    """The result of expr once it has count series (Prometheus scrapes every 2 s)."""
    deadline = time.monotonic() + timeout
    while len(result := query(url, expr)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{expr}: {len(result)} series after {timeout} s, wanted {count}")
        time.sleep(0.5)
    return result


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
    assert not any("exported_agent" in s["metric"] for s in info)  # dropped by relabelling


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
