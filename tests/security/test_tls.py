"""An agent serving TLS, and mutual TLS: the collector's client reaches it with the CA (and,
for mTLS, a client certificate that CA signed), and fails with one clear reason otherwise.
Real `fwbench-agent` processes with a throwaway CA (certs.py)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from security_agents import Agent, Pki, StartAgent, agent_command, agent_environment, describe

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.security import ChannelSecurity, SecurityError, channel_security
from fwbench.runtime.healthcheck import main as healthcheck


def _tls_agent(start_agent: StartAgent, pki: Pki, *extra: str) -> Agent:
    return start_agent("--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key), *extra)


def test_tls_agent_is_reached_with_its_ca_and_refused_without(
    pki: Pki, start_agent: StartAgent
) -> None:
    agent = _tls_agent(start_agent, pki)
    assert "(metrics 0; TLS)" in agent.log.read_text()
    assert describe(agent.address, channel_security(ca=pki.ca.cert, environ={})) == "fake"
    with pytest.raises(AgentUnavailable, match="closes plaintext connections: give --tls-ca"):
        describe(agent.address, ChannelSecurity(), wait=1.5)
    started = time.monotonic()
    stranger_ca = pki.ca.cert.with_name("other-ca.pem")
    with pytest.raises(AgentUnavailable, match=r"TLS refused .*CERTIFICATE_VERIFY_FAILED"):
        describe(agent.address, channel_security(ca=stranger_ca, environ={}))
    assert time.monotonic() - started < 5  # a refusal no retry mends fails at once
    # The name checked is the address's host unless overridden.
    ca = pki.ca.cert.read_bytes()
    assert describe(agent.address, ChannelSecurity(ca=ca, server_name="localhost")) == "fake"
    with pytest.raises(AgentUnavailable, match="Hostname Verification"):
        describe(agent.address, ChannelSecurity(ca=ca, server_name="example.com"))


def test_mutual_tls_demands_a_client_certificate_the_ca_signed(
    pki: Pki, start_agent: StartAgent
) -> None:
    agent = _tls_agent(start_agent, pki, "--tls-client-ca", str(pki.ca.cert))
    assert "(metrics 0; mutual TLS)" in agent.log.read_text()
    ca = pki.ca.cert
    client = channel_security(ca=ca, cert=pki.client.cert, key=pki.client.key, environ={})
    assert describe(agent.address, client) == "fake"
    with pytest.raises(AgentUnavailable, match="without one: give --tls-cert and --tls-key"):
        describe(agent.address, channel_security(ca=ca, environ={}), wait=1.5)
    stranger = channel_security(ca=ca, cert=pki.stranger.cert, key=pki.stranger.key, environ={})
    with pytest.raises(AgentUnavailable, match="may not accept this client certificate"):
        describe(agent.address, stranger, wait=1.5)


def test_the_healthcheck_speaks_tls_from_the_environment(
    pki: Pki, start_agent: StartAgent, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = _tls_agent(start_agent, pki)
    for variable in ("FWBENCH_TLS_CERT", "FWBENCH_TLS_KEY", "FWBENCH_TLS_SERVER_NAME"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("FWBENCH_TLS_CA", str(pki.ca.cert))
    assert healthcheck(["--address", agent.address, "--timeout", "5"]) == 0
    monkeypatch.delenv("FWBENCH_TLS_CA")
    assert healthcheck(["--address", agent.address, "--timeout", "1"]) == 1  # plaintext


def test_unusable_tls_files_are_one_line_and_exit_2(tmp_path: Path, pki: Pki) -> None:
    cases = {
        # a key where the certificate belongs
        ("--tls-cert", pki.server.key, "--tls-key", pki.server.key): (
            f"--tls-cert {pki.server.key} is not a PEM certificate"
        ),
        # a certificate with another certificate's key: gRPC refuses the pair
        ("--tls-cert", pki.server.cert, "--tls-key", pki.client.key): (
            "cannot serve TLS on 127.0.0.1:0: the port is taken, or gRPC refused the "
            "certificate and key (is the key the certificate's?)"
        ),
        (
            "--tls-client-ca",
            pki.ca.cert,
        ): "--tls-client-ca needs --tls-cert and --tls-key (mutual TLS)",
    }
    for args, message in cases.items():
        done = subprocess.run(
            agent_command(*map(str, args)),
            env=agent_environment(tmp_path / "plugin"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        lines = [line for line in done.stderr.splitlines() if line.startswith("fwbench-agent")]
        assert lines == [f"fwbench-agent: {message}"], done.stderr


def test_client_settings_come_from_the_environment_and_are_checked(pki: Pki) -> None:
    env = {"FWBENCH_TLS_CA": str(pki.ca.cert), "FWBENCH_AGENT_TOKEN": "t0k"}
    settings = channel_security(environ=env)
    assert settings.tls and settings.token == "t0k" and settings.cert is None
    assert settings.metadata() == (("authorization", "Bearer t0k"),)
    assert not channel_security(environ={}).tls
    with pytest.raises(SecurityError, match="needs its key"):
        channel_security(cert=pki.client.cert, environ={})
    with pytest.raises(SecurityError, match="is not a PEM private key"):
        channel_security(cert=pki.client.cert, key=pki.client.cert, environ={})
    with pytest.raises(SecurityError, match="cannot read --tls-ca /nonexistent"):
        channel_security(ca=Path("/nonexistent"), environ={})
