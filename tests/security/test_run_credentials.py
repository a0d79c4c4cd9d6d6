"""A cluster run's own credentials (agents/run_tls.py), which the Slurm and Kubernetes launchers
give the agents they start: a real `fwbench-agent` serving the run's certificate behind the
run's token is reached by the run's channel alone; the token never travels in plaintext; the
files are this user's only; another run's credentials do not open it."""

from __future__ import annotations

from pathlib import Path

import pytest
from security_agents import StartAgent, describe

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.run_tls import SERVER_NAME, RunCredentials
from fwbench.collector.agents.security import ChannelSecurity


def test_only_the_runs_channel_opens_an_agent_serving_the_runs_credentials(
    tmp_path: Path, start_agent: StartAgent
) -> None:
    made = RunCredentials.make("r1")
    folder = tmp_path / "run"
    folder.mkdir()
    files = made.write(folder)
    for path in (files.token, files.cert, files.key):
        assert oct(path.stat().st_mode & 0o777) == "0o600", path
    assert files.token.read_text() == made.token + "\n"
    agent = start_agent(
        "--token-file", str(files.token), "--tls-cert", str(files.cert), "--tls-key", str(files.key)
    )
    assert "token and TLS" in agent.log.read_text()
    assert describe(agent.address, made.channel()) == "fake"
    # Plaintext, even with the right token: the agent closes the connection.
    with pytest.raises(AgentUnavailable, match="closes plaintext connections"):
        describe(agent.address, ChannelSecurity(token=made.token), wait=1.5)
    # TLS with the run's CA but no token: refused before the request is read.
    with pytest.raises(AgentUnavailable, match="UNAUTHENTICATED"):
        describe(agent.address, ChannelSecurity(ca=made.ca, server_name=SERVER_NAME))
    # Another run's channel trusts another CA: the handshake fails at once.
    other = RunCredentials.make("r2")
    assert other.token != made.token and other.ca != made.ca
    with pytest.raises(AgentUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        describe(
            agent.address, ChannelSecurity(token=made.token, ca=other.ca, server_name=SERVER_NAME)
        )
    # The run's CA, but checking the address's own name: the certificate does not carry it.
    with pytest.raises(AgentUnavailable, match="Hostname Verification"):
        describe(agent.address, ChannelSecurity(token=made.token, ca=made.ca))
