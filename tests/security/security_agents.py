"""Real `fwbench-agent` processes for the security tests: the runtime tests' fake plugin, made
loadable by a throwaway .dist-info folder on PYTHONPATH (nothing is installed); and the
throwaway certificates of a test (certs.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from certs import Authority, Pair

from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.security import ChannelSecurity

RUNTIME_TESTS = Path(__file__).parents[1] / "runtime"


@dataclass(frozen=True)
class Pki:
    ca: Authority
    server: Pair  # for 127.0.0.1 and localhost, signed by ca
    client: Pair  # signed by ca
    stranger: Pair  # a client certificate some other CA signed


@dataclass
class Agent:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"


def agent_environment(folder: Path, extra: Mapping[str, str] = {}) -> dict[str, str]:
    """os.environ, less any security variables of the caller's, plus the fake plugin's
    PYTHONPATH and `extra`."""
    dist = folder / "fwbench_security_fake-0.0.0.dist-info"
    if not dist.exists():
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fwbench-security-fake\n")
        (dist / "entry_points.txt").write_text("[fwbench.plugins]\nfake = fake_plugin:FakePlugin\n")
    security = ("FWBENCH_TLS", "FWBENCH_AGENT_TOKEN")
    env = {k: v for k, v in os.environ.items() if not k.startswith(security)}
    return {**env, "PYTHONPATH": os.pathsep.join([str(folder), str(RUNTIME_TESTS)]), **extra}


def agent_command(*args: str) -> list[str]:
    """`fwbench-agent` of the fake plugin, named "fake" (as `python -m`: no console script is
    needed on PATH)."""
    return [sys.executable, "-m", "fwbench.runtime.cli", "--plugin=fake", "--name=fake", *args]


StartAgent = Callable[..., Agent]


def describe(address: str, security: ChannelSecurity, wait: float = 10) -> str:
    """The agent's name, as the collector's client reads it once the agent is healthy."""
    client = AgentClient("fake", address, security)
    try:
        client.wait_healthy(wait)
        return client.describe().identity.name
    finally:
        client.close()
