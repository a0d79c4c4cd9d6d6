"""`python -m fwbench.runtime.healthcheck`, the images' HEALTHCHECK: exit 0 only while the
agent says SERVING."""

from __future__ import annotations

import socket

import pytest

from fwbench.runtime.healthcheck import check, main
from fwbench.runtime.server import AgentServer


def test_healthcheck_passes_while_the_agent_serves(agent: AgentServer) -> None:
    assert check(f"127.0.0.1:{agent.port}", 2.0) == "SERVING"
    assert main(["--address", f"127.0.0.1:{agent.port}"]) == 0


def test_healthcheck_fails_once_the_agent_shuts_down(agent: AgentServer) -> None:
    agent.health.enter_graceful_shutdown()
    assert check(f"127.0.0.1:{agent.port}", 2.0) == "NOT_SERVING"
    assert main(["--address", f"127.0.0.1:{agent.port}"]) == 1


def test_healthcheck_fails_without_an_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening: refused
        monkeypatch.setenv("FWBENCH_GRPC_PORT", str(port))
        assert main(["--timeout", "1"]) == 1
        assert check(f"127.0.0.1:{port}", 1.0).startswith("unreachable")
