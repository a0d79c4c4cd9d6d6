"""Cancel is scoped to its caller: a Cancel without a run id stops only the caller's own run
(callers are told apart by the collector's `x-fwbench-client` id, else by their connection),
a Cancel naming the run id stops that run, and a busy agent does not tell other callers the
id of the run it is busy with. With a token, every authenticated caller is trusted. Real
`fwbench-agent` processes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from security_agents import StartAgent

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.security import ChannelSecurity

TOKEN = "cancel-scope-token"


def _long(run_id: str = "") -> agent_pb2.RunRequest:
    """20 ms steps for up to an hour."""
    return agent_pb2.RunRequest(
        run_id=run_id,
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params={"m": 20000},
        warmup_iterations=1,
        min_iterations=3,
        min_seconds=3600.0,
    )


class Running:
    """A Run call consumed on a thread; `code` is its final status once it ended."""

    def __init__(self, events: Iterator[agent_pb2.RunResponse]) -> None:
        self.measuring = threading.Event()
        self.code: grpc.StatusCode | None = None
        self.thread = threading.Thread(target=self._consume, args=(events,))
        self.thread.start()
        assert self.measuring.wait(15), "the run never reached its timed loop"

    def _consume(self, events: Iterator[agent_pb2.RunResponse]) -> None:
        try:
            for event in events:
                if event.progress.stage == agent_pb2.STAGE_MEASURE:
                    self.measuring.set()
        except grpc.RpcError as error:
            self.code = error.code()
        self.measuring.set()

    def ended(self, seconds: float) -> bool:
        self.thread.join(seconds)
        return not self.thread.is_alive()


@pytest.fixture
def clients() -> Iterator[list[AgentClient]]:
    made: list[AgentClient] = []
    yield made
    for client in made:
        client.close()


def _client(clients: list[AgentClient], address: str, token: str = "") -> AgentClient:
    client = AgentClient("fake", address, ChannelSecurity(token=token))
    clients.append(client)
    client.wait_healthy(10)
    return client


def test_cancel_without_run_id_stops_only_the_callers_own_run(
    start_agent: StartAgent, clients: list[AgentClient]
) -> None:
    agent = start_agent()
    owner, other = _client(clients, agent.address), _client(clients, agent.address)
    run = Running(owner.run(_long(), timeout_seconds=60))  # the agent picks the run id
    assert not other.cancel("")
    assert not run.ended(0.5)  # still measuring
    with pytest.raises(grpc.RpcError) as busy:
        list(other.run(_long(), timeout_seconds=10))
    assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "busy with another caller's run" in busy.value.details()  # no id to cancel with
    assert owner.cancel("")
    assert run.ended(10) and run.code == grpc.StatusCode.CANCELLED


def test_cancel_naming_the_run_id_stops_it_for_any_caller(
    start_agent: StartAgent, clients: list[AgentClient]
) -> None:
    agent = start_agent()
    owner, other = _client(clients, agent.address), _client(clients, agent.address)
    run = Running(owner.run(_long("run-7f3a9c"), timeout_seconds=60))
    assert not other.cancel("run-other")
    assert other.cancel("run-7f3a9c")
    assert run.ended(10) and run.code == grpc.StatusCode.CANCELLED


def test_without_a_client_id_the_connection_is_the_caller(start_agent: StartAgent) -> None:
    agent = start_agent()
    own = [("grpc.use_local_subchannel_pool", 1)]  # a connection each, as two processes have
    with (
        grpc.insecure_channel(agent.address, options=own) as first,
        grpc.insecure_channel(agent.address, options=own) as second,
    ):
        owner = agent_pb2_grpc.AgentServiceStub(first)
        run = Running(owner.Run(_long(), timeout=60))
        cancel = agent_pb2.CancelRequest()
        assert not agent_pb2_grpc.AgentServiceStub(second).Cancel(cancel, timeout=5).cancelled
        assert owner.Cancel(cancel, timeout=5).cancelled
        assert run.ended(10) and run.code == grpc.StatusCode.CANCELLED


def test_with_a_token_every_authenticated_caller_may_cancel(
    tmp_path: Path, start_agent: StartAgent, clients: list[AgentClient]
) -> None:
    agent = start_agent(env={"FWBENCH_AGENT_TOKEN": TOKEN})
    owner = _client(clients, agent.address, TOKEN)
    other = _client(clients, agent.address, TOKEN)
    run = Running(owner.run(_long(), timeout_seconds=60))
    assert other.cancel("")
    assert run.ended(10) and run.code == grpc.StatusCode.CANCELLED
