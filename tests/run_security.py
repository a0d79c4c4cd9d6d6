"""What a stranger meets at an agent a cluster launcher started (Slurm, Kubernetes): the run's
token over TLS with the run's own certificate (agents/run_tls.py), so neither the token alone
in plaintext nor the run's TLS without the token opens it."""

from __future__ import annotations

import dataclasses

import pytest

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.security import ChannelSecurity


def refuse_strangers(address: str, run: ChannelSecurity) -> None:
    """`run`, the launcher's channel, is TLS with a token; a caller with only half is refused."""
    assert run.tls and run.token
    halves = (
        (ChannelSecurity(token=run.token), "closes plaintext connections"),
        (dataclasses.replace(run, token=""), "UNAUTHENTICATED"),
    )
    for security, refusal in halves:
        stranger = AgentClient("stranger", address, security)
        try:
            with pytest.raises(AgentUnavailable, match=refusal):
                stranger.wait_healthy(1.5)
                stranger.describe()
        finally:
            stranger.close()
