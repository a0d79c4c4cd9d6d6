"""An agent started with a token answers AgentService calls only when they carry
`authorization: Bearer TOKEN`; its health service and reflection stay open (probes, the public
schema). Real `fwbench-agent` processes, real sockets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from security_agents import StartAgent, agent_command, agent_environment

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.security import ChannelSecurity

TOKEN = "s3cret-token-for-tests"
RUN = agent_pb2.RunRequest(
    workload="gemm", phase=agent_pb2.PHASE_INFER, batch_size=1, params={"m": 100}
)


def _token_file(tmp_path: Path, token: str = TOKEN) -> Path:
    path = tmp_path / "token"
    path.write_text(token + "\n")  # a file's newline is not part of the token
    return path


def _code(call: object) -> grpc.StatusCode:
    with pytest.raises(grpc.RpcError) as caught:
        call()  # type: ignore[operator]
    code: grpc.StatusCode = caught.value.code()
    return code


def test_calls_without_the_right_token_are_unauthenticated(
    tmp_path: Path, start_agent: StartAgent
) -> None:
    agent = start_agent("--token-file", str(_token_file(tmp_path)))
    assert "(metrics 0; token)" in agent.log.read_text()
    with grpc.insecure_channel(agent.address) as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        describe = agent_pb2.DescribeRequest()
        for metadata in [(), (("authorization", "Bearer wrong"),), (("authorization", TOKEN),)]:
            with pytest.raises(grpc.RpcError) as caught:
                stub.Describe(describe, timeout=5, metadata=metadata)
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "authorization: Bearer TOKEN" in caught.value.details()
        # A streaming call is refused the same way, before any work starts.
        assert _code(lambda: list(stub.Run(RUN, timeout=5))) == grpc.StatusCode.UNAUTHENTICATED
        assert _code(lambda: stub.Cancel(agent_pb2.CancelRequest(), timeout=5)) == (
            grpc.StatusCode.UNAUTHENTICATED
        )
        right = (("authorization", f"Bearer {TOKEN}"),)
        assert stub.Describe(describe, timeout=5, metadata=right).identity.name == "fake"
        events = list(stub.Run(RUN, timeout=30, metadata=right))
        assert events[-1].result.sample_nanoseconds
        # Open without a token: the health service (probes) and reflection (the schema).
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        replies = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        names = {s.name for r in replies for s in r.list_services_response.service}
        assert "fwbench.agent.v1.AgentService" in names


def test_the_collectors_client_sends_the_token(tmp_path: Path, start_agent: StartAgent) -> None:
    agent = start_agent(env={"FWBENCH_AGENT_TOKEN": TOKEN})  # the container's way
    client = AgentClient("fake", agent.address, ChannelSecurity(token=TOKEN))
    try:
        client.wait_healthy(10)
        assert client.describe().identity.name == "fake"
    finally:
        client.close()
    stranger = AgentClient("fake", agent.address, ChannelSecurity(token="not-" + TOKEN))
    try:
        stranger.wait_healthy(10)  # the health service needs no token
        with pytest.raises(AgentUnavailable, match="UNAUTHENTICATED the token is wrong"):
            stranger.describe()
    finally:
        stranger.close()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--token-file", "/nonexistent/t"], "cannot read token file /nonexistent/t: No such file"),
        (["--tls-cert", "/nonexistent/c"], "--tls-cert and --tls-key go together"),
        (["--tls-cert", "/nonexistent/c", "--tls-key", "/nonexistent/k"], "cannot read --tls-cert"),
    ],
)
def test_a_bad_security_file_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    done = subprocess.run(
        agent_command(*args),
        env=agent_environment(tmp_path / "plugin"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"fwbench-agent: {message}"), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr


def test_an_empty_token_file_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("\n")
    done = subprocess.run(
        agent_command(),
        env=agent_environment(tmp_path / "plugin", {"FWBENCH_AGENT_TOKEN_FILE": str(empty)}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (2, f"fwbench-agent: token file {empty} is empty\n")


def test_serving_beyond_loopback_unguarded_warns(start_agent: StartAgent) -> None:
    open_agent = start_agent("--host", "0.0.0.0")
    warning = "warning: listening on 0.0.0.0 with neither a token nor TLS"
    assert warning in open_agent.log.read_text()
    local = start_agent()  # loopback, the default: no warning
    assert "warning" not in local.log.read_text()
