from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fake_plugin import FakePlugin

from fwbench.agent.v1 import agent_pb2_grpc
from fwbench.runtime.server import AgentServer, create_server


@pytest.fixture
def agent() -> Iterator[AgentServer]:
    server = create_server(FakePlugin(), name="fake-cpu", variant="cpu")  # reflection: default
    yield server
    server.stop(0)


@pytest.fixture
def channel(agent: AgentServer) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{agent.port}") as chan:
        yield chan


@pytest.fixture
def stub(channel: grpc.Channel) -> agent_pb2_grpc.AgentServiceStub:
    return agent_pb2_grpc.AgentServiceStub(channel)
