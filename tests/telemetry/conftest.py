from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))  # fake_nvml
sys.path.insert(0, str(Path(__file__).parent))
from telemetry_agents import AgentProcess, agent_processes


@pytest.fixture(scope="session")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[AgentProcess]]:
    """Two real agent processes with the fake plugin, shared by the telemetry tests."""
    with agent_processes(tmp_path_factory.mktemp("agents")) as handles:
        yield handles
