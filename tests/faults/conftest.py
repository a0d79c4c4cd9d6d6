"""Fixtures of the fault tests: agents run as real processes, the collector as the command."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.launchers.local import start_local

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # fault_cli
sys.path.insert(0, str(HERE.parent))  # fake_agent


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def start(mode: str) -> str:
        port_file = tmp_path / f"{mode}.json"
        process = subprocess.Popen([sys.executable, str(HERE / "liar_agent.py"), mode, port_file])
        started.append(process)
        deadline = time.monotonic() + 30
        while not port_file.exists():
            assert process.poll() is None and time.monotonic() < deadline, "liar did not start"
            time.sleep(0.05)
        return f"127.0.0.1:{json.loads(port_file.read_text())['port']}"

    yield start
    for process in started:
        process.kill()
        process.wait()


@pytest.fixture(scope="module")
def numpy_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentHandle]:
    """A real numpy-cpu agent (a real gemm, a small environment), started as `collector run`
    starts one, for the tests to attach to or call directly."""
    manifest = discover_manifests(manifest_dirs())["numpy-cpu"]
    environment_for(manifest).ensure()
    handle = start_local(manifest, tmp_path_factory.mktemp("logs"))
    yield handle
    handle.stop()
