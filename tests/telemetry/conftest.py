from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))  # fake_nvml
sys.path.insert(0, str(Path(__file__).parent))
from prometheus_server import prometheus_server
from telemetry_agents import AgentProcess, agent_processes


@pytest.fixture(scope="session")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[AgentProcess]]:
    """Two real agent processes with the fake plugin, shared by the telemetry tests."""
    with agent_processes(tmp_path_factory.mktemp("agents")) as handles:
        yield handles


@pytest.fixture(scope="session")
def prometheus(
    agents: list[AgentProcess], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real Prometheus scraping the agents with the compose scrape configuration; its URL."""
    with prometheus_server(agents, tmp_path_factory.mktemp("prometheus")) as url:
        yield url
