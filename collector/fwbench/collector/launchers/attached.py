"""Attached agents: `NAME@HOST:PORT`, an agent someone else runs. Nothing is started or
stopped but the channel (with a token and/or TLS: agents/security.py); the handle is the base
AgentHandle."""

from __future__ import annotations

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import AgentHandle


def attach(
    instance: Instance,
    address: str,
    timeout_seconds: float = 10.0,
    security: ChannelSecurity | None = None,
) -> AgentHandle:
    """A handle on the agent at `address` once its health service says SERVING; raises
    AgentUnavailable."""
    client = AgentClient(str(instance), address, security)
    try:
        client.wait_healthy(timeout_seconds)
    except AgentUnavailable:
        client.close()
        raise
    return AgentHandle(instance=instance, address=address, client=client)
