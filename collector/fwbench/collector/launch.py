"""Launchers: how an agent process comes to exist and goes away.

- local: the agent's virtual environment (made from its manifest, see envs.py), the agent as
  its own process on free loopback ports, health-checked, and always stopped at the end.
- attached: `name@host:port`, an agent someone else runs; nothing is started or stopped.
- docker: a container per agent from its image (docker_launcher.py); its handle holds a
  ContainerControl instead of a process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from fwbench.collector.client import AgentClient, AgentUnavailable
from fwbench.collector.envs import environment_for
from fwbench.collector.manifest import AgentManifest

START_TIMEOUT_SECONDS = 180.0


class ContainerControl(Protocol):
    """What a handle needs of the container an agent runs in (docker_launcher.ContainerAgent)."""

    def alive(self) -> bool:
        """Whether the container is running; asks the daemon (blocks briefly)."""

    def exit_reason(self) -> str:
        """Why the container is gone: exit code or OOM kill, with the last log line."""

    def stop(self, grace_seconds: float) -> None:
        """Stops and removes the container, keeping its log; idempotent."""


@dataclass
class AgentHandle:
    """A reachable agent: a local `process`, a `container`, or neither (attached)."""

    name: str
    launcher: str
    address: str
    client: AgentClient
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    manifest: AgentManifest | None = None
    env_path: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)
    threads: int = 0  # FWBENCH_THREADS it was started with; 0 = framework default
    # host:port of the agent's Prometheus /metrics as the collector reaches it ("" = none).
    metrics_address: str = ""
    container: ContainerControl | None = None
    image: str = ""  # docker: the image's tag, id (sha256:...) and registry digest ("" if local)
    image_id: str = ""
    image_digest: str = ""
    # The agent's process id as this host sees it (a container's main process); 0 = unknown
    # (attached: the collector only has the agent's own word, Describe's pid).
    host_pid: int = 0

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        if self.container is not None:
            return self.container.alive()
        return self.client.healthy()

    def exit_reason(self) -> str:
        """Why the agent is gone, with the tail of its log when there is one."""
        if self.container is not None:
            return self.container.exit_reason()
        if self.process is None:
            return f"agent at {self.address} stopped answering"
        code = self.process.poll()
        if code is None:
            return "agent process is running but not answering"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return f"agent process {how}{self._log_tail()}"

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line]
        return f"; last log line: {lines[-1][:300]}" if lines else ""

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Stops a local agent or container (SIGTERM, then SIGKILL after the grace period).
        Idempotent."""
        self.client.close()
        if self.container is not None:
            self.container.stop(grace_seconds)
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(grace_seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def parse_attached(spec: str) -> tuple[str, str] | None:
    """`name@host:port` -> (name, "host:port"); None when spec is a plain agent name."""
    name, sep, address = spec.partition("@")
    if not sep:
        return None
    host, colon, port = address.rpartition(":")
    if not name or not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"invalid agent address {spec!r}: expected NAME@HOST:PORT")
    return name, address


def attach(name: str, address: str, timeout_seconds: float = 10.0) -> AgentHandle:
    client = AgentClient(name, address)
    try:
        client.wait_healthy(timeout_seconds)
    except AgentUnavailable:
        client.close()
        raise
    return AgentHandle(name=name, launcher="attached", address=address, client=client)


def start_local(
    manifest: AgentManifest,
    log_dir: Path,
    report: Callable[[str], None] = lambda _: None,
    timeout_seconds: float = START_TIMEOUT_SECONDS,
    threads: int = 0,
    instance: str = "",
) -> AgentHandle:
    """Prepares the environment if needed and starts the agent; raises AgentUnavailable or
    EnvironmentBuildError. The process is in its own session, so a Ctrl-C in the terminal
    reaches only the collector, which then stops it in order. `threads` > 0 starts it with
    FWBENCH_THREADS, for frameworks that size their thread pools at start-up. `instance`
    names a further instance of the same agent (A/A runs: NAME#2) for its handle and log."""
    name = instance or manifest.name
    env = environment_for(manifest)
    env.ensure(report)
    variables = {**os.environ, **manifest.env}
    suffix = ""
    if threads:
        variables["FWBENCH_THREADS"] = str(threads)
        suffix = f"-threads{threads}"
    log_path = log_dir / f"{name}{suffix}.log"
    ports_file = Path(tempfile.mkdtemp(prefix="fwbench-ports-")) / f"{manifest.name}.json"
    command = [
        str(env.python),
        "-m",
        "fwbench.runtime.cli",
        "--plugin",
        manifest.plugin,
        "--name",
        manifest.name,
        "--variant",
        manifest.variant,
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--metrics-port",
        "0",
        "--ports-file",
        str(ports_file),
        "--exit-with-parent",
        str(os.getpid()),
    ]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=variables,
            start_new_session=True,
        )
    handle = AgentHandle(
        name=name,
        launcher="local",
        address="",
        process=process,
        client=AgentClient(name, "unset"),
        log_path=log_path,
        manifest=manifest,
        env_path=env.path,
        threads=threads,
        host_pid=process.pid,
    )
    try:
        ports = _wait_for_ports(handle, ports_file, timeout_seconds)
        handle.address = f"127.0.0.1:{ports['grpc']}"
        if ports.get("metrics"):
            handle.metrics_address = f"127.0.0.1:{ports['metrics']}"
        handle.client = AgentClient(name, handle.address)
        handle.client.wait_healthy(timeout_seconds, alive=handle.alive)
    except BaseException:
        handle.stop()
        raise
    return handle


def _wait_for_ports(handle: AgentHandle, ports_file: Path, timeout: float) -> dict[str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ports_file.exists():
            ports: dict[str, int] = json.loads(ports_file.read_text())
            ports_file.unlink()
            ports_file.parent.rmdir()
            return ports
        if not handle.alive():
            raise AgentUnavailable(f"agent {handle.name} failed to start: {handle.exit_reason()}")
        time.sleep(0.1)
    raise AgentUnavailable(
        f"agent {handle.name} did not start within {timeout:.0f} s (log: {handle.log_path})"
    )
