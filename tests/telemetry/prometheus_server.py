"""A real Prometheus server (Debian's prometheus package) for the telemetry tests: it scrapes
agent processes with the scrape settings of compose/prometheus/prometheus.yml, copied verbatim,
and only its targets file swapped for the agents' loopback ports. Shared by the Prometheus
configuration tests and the dashboards' live query test."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from telemetry_agents import AgentProcess

PROMETHEUS_DIR = Path(__file__).parents[2] / "compose" / "prometheus"
PROMETHEUS = "/usr/bin/prometheus"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@contextmanager
def prometheus_server(agents: Sequence[AgentProcess], folder: Path) -> Iterator[str]:
    """A Prometheus server scraping the agents; yields its base URL; always killed. Without
    agents, FOLDER/targets is left to whoever writes targets there (the collector)."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus missing: `make system-deps` installs Debian's prometheus package")
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


def label_values(url: str, label: str, selector: str) -> list[str]:
    """Grafana's label_values(selector, label): the label's values on matching series."""
    params = urllib.parse.urlencode({"match[]": selector})
    body = get_json(f"{url}/api/v1/label/{label}/values?{params}")
    assert body["status"] == "success", body
    return sorted(body["data"])
