"""Fixtures of the security tests: real `fwbench-agent` processes (security_agents.py) and a
throwaway certificate authority (certs.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # certs, security_agents
from certs import authority
from security_agents import Agent, Pki, StartAgent, agent_command, agent_environment


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    folder = tmp_path / "pki"
    folder.mkdir()
    ca = authority(folder)
    other = authority(folder, "other-ca")
    return Pki(
        ca,
        ca.issue(folder, "server", server=True),
        ca.issue(folder, "client", server=False),
        other.issue(folder, "stranger", server=False),
    )


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[StartAgent]:
    """start_agent(*args, env={...}) -> a serving agent, stopped after the test."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*args: str, env: Mapping[str, str] = {}) -> Agent:
        n = len(started)
        ports, log = tmp_path / f"agent{n}.json", tmp_path / f"agent{n}.log"
        command = agent_command("--ports-file", str(ports), "--no-metrics", *args)
        with log.open("wb") as out:
            process = subprocess.Popen(
                command, env=agent_environment(tmp_path / "plugin", env), stderr=out, stdout=out
            )
        started.append(process)
        deadline = time.monotonic() + 30
        while not ports.exists() or "serving on" not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the agent did not start in 30 s"
            time.sleep(0.05)
        return Agent(process, json.loads(ports.read_text())["grpc"], log)

    yield start
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
