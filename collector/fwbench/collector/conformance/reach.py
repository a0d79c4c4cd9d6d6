"""How the suite reaches its agent where it differs from `collector run`:

- an agent running elsewhere (HOST:PORT) that answers gRPC but serves no health service is
  checked, and fails the health check, instead of being reported unreachable (exit 2): the
  suite names what is wrong with an agent that answers;
- the variables the agent must report (FWBENCH_REPORT_VARIABLES, agent.proto's
  Describe.environment): an agent the suite starts gets --agent-env's (checked as `collector
  run --agent-env` checks them) and a probe of the suite's own, PROBE_VARIABLE, so the check
  always runs; for an agent running elsewhere, --agent-env says what it was started with."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fwbench.collector.agents.agent_environment import check_against, parse_agent_environment
from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import AgentHandle
from fwbench.spec import settings

PROBE_VARIABLE = settings.CONFORMANCE_PROBE


def attach_for_suite(
    instance: Instance, timeout_seconds: float, security: ChannelSecurity | None
) -> AgentHandle:
    """A handle on the agent at `instance.address` once its health service says SERVING, or
    at once when it answers that it has none; raises AgentUnavailable."""
    address = instance.address
    client = AgentClient(str(instance), address, security)
    try:
        if not _without_health(client):
            client.wait_healthy(timeout_seconds)
    except AgentUnavailable:
        if not _without_health(client):
            client.close()
            raise
    return AgentHandle(instance=instance, address=address, client=client)


def _without_health(client: AgentClient) -> bool:
    """Whether the agent answers, UNIMPLEMENTED, that it serves no grpc.health.v1."""
    stub = health_pb2_grpc.HealthStub(client.channel)
    try:
        stub.Check(health_pb2.HealthCheckRequest(), timeout=2, metadata=client.metadata())
    except grpc.RpcError as error:
        return bool(error.code() == grpc.StatusCode.UNIMPLEMENTED)
    return False


def suite_variables(
    items: Iterable[str], instance: Instance, declared: Mapping[str, AgentManifest]
) -> tuple[dict[str, str], dict[str, str]]:
    """(the variables to start the agent with, those it must report) for --agent-env's
    NAME=VALUE items; raises AgentSpecError as `collector run --agent-env` does."""
    variables = parse_agent_environment(items)
    if instance.attached:
        return {}, variables
    manifest = declared.get(instance.agent)
    check_against(variables, [], [manifest] if manifest is not None else [])
    started = {**variables, PROBE_VARIABLE: f"conformance-{uuid.uuid4().hex[:12]}"}
    return started, started
