"""The Docker launcher's options (DockerOptions), and one agent container: its name, limits,
creation with loopback ports (and a world's network), and what the launcher reads back from it
(docker.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Self

import psutil

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.docker_engine import docker_errors
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.launchers.base import DEFAULT_MEMORY_SHARE, DEFAULT_PIDS_LIMIT
from fwbench.collector.launchers.options import Flag, LauncherOptions, OptionContext

if TYPE_CHECKING:
    import docker


@dataclass(frozen=True)
class ContainerLimits:
    """What one agent container may use: memory (Docker's syntax, "8g"; "" = the default
    share of the host) and processes (threads included)."""

    memory: str = ""
    pids_limit: int = DEFAULT_PIDS_LIMIT


_LIMITS = "{flag} limits containers: it goes with --launcher {kinds}"


@dataclass(frozen=True)
class DockerOptions(LauncherOptions):
    """The Docker launcher's own options: the CPUs each container is pinned to ("0-1"; "" =
    all) and its limits (--cpuset, --memory, --pids-limit)."""

    FLAGS: ClassVar[Mapping[str, Flag]] = {
        parameter: Flag(f"--{parameter.replace('_', '-')}", default, _LIMITS)
        for parameter, default in (
            ("cpuset", ""),
            ("memory", ""),
            ("pids_limit", DEFAULT_PIDS_LIMIT),
        )
    }

    cpuset: str = ""
    memory: str = ""
    pids_limit: int = DEFAULT_PIDS_LIMIT

    @classmethod
    def parse(cls, given: Mapping[str, Any], context: OptionContext) -> Self:
        defaults = cls()
        return cls(
            cpuset=given.get("cpuset") or defaults.cpuset,
            memory=given.get("memory") or defaults.memory,
            pids_limit=given.get("pids_limit") or defaults.pids_limit,
        )

    @property
    def limits(self) -> ContainerLimits:
        return ContainerLimits(self.memory, self.pids_limit)


def _default_memory() -> int:
    return int(psutil.virtual_memory().total * DEFAULT_MEMORY_SHARE)


def agent_pid(container: Any) -> int:
    """The agent's process id as this host sees it: the container's main process is the
    init (tini), the agent its child (fwbench-agent in the repository's images; in an image
    that declares itself, whatever its entrypoint started). 0 when `docker top` does not
    tell."""
    try:
        top = container.top()
    except docker_errors().APIError:
        return 0
    titles = top.get("Titles") or []
    if "PID" not in titles or "CMD" not in titles:
        return 0
    pid, cmd = titles.index("PID"), titles.index("CMD")
    children = [row for row in top.get("Processes") or [] if "docker-init" not in row[cmd]]
    found = [row for row in children if "fwbench-agent" in row[cmd]] or children[:1]
    return int(found[0][pid]) if found else 0


def run_container(
    client: docker.DockerClient,
    manifest: AgentManifest,
    image_id: str,
    name: str,
    labels: dict[str, str],
    environment: dict[str, str],
    cpuset: str,
    limits: ContainerLimits,
    network: str = "",
    mounts: Sequence[tuple[Path, bool]] = (),
) -> Any:
    """Creates and starts the container; its ports go to 127.0.0.1 on ports the daemon picks
    (a one-element binding is the host address alone)."""
    ports = [f"{port}/tcp" for port in (manifest.grpc_port, manifest.metrics_port) if port]
    loopback: dict[str, Any] = {port: ("127.0.0.1",) for port in ports}
    from docker.types import DeviceRequest

    gpus = [DeviceRequest(count=-1, capabilities=[["gpu"]])] if manifest.requires_gpu else None
    try:
        return client.containers.run(
            image_id,
            detach=True,
            name=name,
            labels=labels,
            environment=environment,
            ports=loopback,
            hostname=str(client.info().get("Name", "")) or None,  # the machine, not an id
            cpuset_cpus=cpuset or None,
            device_requests=gpus,
            # An init process as PID 1 (docker's tini): signals reach the agent, zombies of
            # its compiler subprocesses (torch.compile, XLA) are reaped.
            init=True,
            mem_limit=limits.memory or _default_memory(),
            pids_limit=limits.pids_limit,
            security_opt=["no-new-privileges"],
            network=network or None,
            volumes={
                str(path): {"bind": str(path), "mode": "rw" if writable else "ro"}
                for path, writable in mounts
            },
        )
    except docker_errors().APIError as error:
        raise AgentUnavailable(f"docker refused container {name}: {error}") from None


def safe_name(name: str) -> str:
    """An instance name as Docker allows in names ([a-zA-Z0-9_.-]): NAME#2, NAME~w2 -> NAME-2,
    NAME-w2."""
    return name.replace("#", "-").replace("~", "-")


def container_name(run_id: str, instance: str) -> str:
    return f"fwbench-{run_id}-{safe_name(instance)}"


def host_port(container: Any, port: str) -> str:
    bindings = container.ports.get(port) or []
    if not bindings:
        raise AgentUnavailable(f"container {container.name} has no published port {port}")
    return str(bindings[0]["HostPort"])
