"""Real agent processes in their own virtual environments, made by the collector's local
launcher exactly as `collector run` makes them (cached between test runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fwbench.collector.agents.environments import AgentEnvironment, environment_for
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests, manifest_dirs
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.launchers.local import start_local

sys.path.insert(0, str(Path(__file__).parent))  # collector_cli
sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent


@pytest.fixture(scope="session")
def torch_manifest() -> AgentManifest:
    return discover_manifests(manifest_dirs())["torch-cpu"]


@pytest.fixture(scope="session")
def torch_env(torch_manifest: AgentManifest) -> AgentEnvironment:
    env = environment_for(torch_manifest)
    env.ensure()
    return env


@pytest.fixture(scope="module")
def torch_agent(
    torch_env: AgentEnvironment, torch_manifest: AgentManifest, tmp_path_factory
) -> Iterator[AgentHandle]:
    handle = start_local(torch_manifest, tmp_path_factory.mktemp("logs"))
    yield handle
    handle.stop()


def _start_agent_process(
    env: AgentEnvironment, tmp: Path, *args: str
) -> tuple[subprocess.Popen, int]:
    """A bare agent process (no launcher), for options the launcher does not use."""
    ports = tmp / "ports.json"
    process = subprocess.Popen(
        [
            str(env.python),
            "-m",
            "fwbench.runtime.cli",
            "--plugin",
            "torch",
            "--name",
            "torch-cpu",
            "--ports-file",
            str(ports),
            *args,
        ],
        env={**os.environ, "FWBENCH_DEVICE": "cpu"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while not ports.exists():
        assert process.poll() is None, "agent exited during start-up"
        assert time.monotonic() < deadline, "agent did not start"
        time.sleep(0.1)
    return process, json.loads(ports.read_text())["grpc"]


@pytest.fixture
def isolated_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store.sqlite"
    monkeypatch.setenv("FWBENCH_STORE", str(store))
    return store


@pytest.fixture
def agent_process_starter():
    """Starts bare torch agent processes: starter(env, tmp_dir, *args) -> (process, port)."""
    started: list[subprocess.Popen] = []

    def start(env: AgentEnvironment, tmp: Path, *args: str) -> tuple[subprocess.Popen, int]:
        process, port = _start_agent_process(env, tmp, *args)
        started.append(process)
        return process, port

    yield start
    for process in started:
        process.kill()
        process.wait()
