"""Docker launcher: one container per agent, from the agent's image (built or refreshed by the
caller's `image_for`, see images/build.py), with its ports published on 127.0.0.1 only (random
host ports), the GPUs requested for GPU agents, and optionally pinned to a set of CPUs.

Every container carries the run's id, this host and this collector's pid as labels. A run
removes its containers on every way out: ContainerAgent.stop() (idempotent) for each agent,
then DockerLauncher.close() for anything a Ctrl-C left half-started; remove_orphans() sweeps
what a collector killed outright (SIGKILL) left behind."""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import docker
import docker.errors
import psutil
from docker.types import DeviceRequest

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.docker_engine import ImageInfo, docker_client
from fwbench.collector.agents.launchers.base import (
    DEFAULT_MEMORY_SHARE,
    DEFAULT_PIDS_LIMIT,
    START_TIMEOUT_SECONDS,
    AgentHandle,
    LauncherKind,
    LaunchSettings,
)
from fwbench.collector.agents.launchers.docker_sweep import (
    HOST_LABEL,
    PID_LABEL,
    RUN_LABEL,
    refuse_if_closed,
    remove_orphans,
    remove_run_containers,
)
from fwbench.collector.agents.manifest import AgentManifest


@dataclass
class ContainerAgent(AgentHandle):
    """An agent in a container this collector started."""

    kind: ClassVar[str] = LauncherKind.DOCKER.value

    container: Any = None  # docker.models.containers.Container
    image: ImageInfo | None = None

    def alive(self) -> bool:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return False
        return bool(self.container.status == "running")

    def exit_reason(self) -> str:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return f"container {self.container.name} is gone"
        state = self.container.attrs["State"]
        if state.get("Running"):
            return "agent container is running but not answering"
        how = f"exited with code {state.get('ExitCode')}"
        if state.get("OOMKilled"):
            how = "was killed for using too much memory"
        lines = [line for line in self.logs().splitlines() if line.strip()]
        tail = f"; last log line: {lines[-1][:300]}" if lines else ""
        return f"agent container {self.container.name} {how}{tail}"

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Stops (SIGTERM, SIGKILL after the grace period), keeps the log, removes. Idempotent;
        a container already gone (or being removed by the run's sweep) is no error."""
        self.client.close()
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            self.container.stop(timeout=max(1, round(grace_seconds)))
        logs = self.logs()
        if logs and self.log_path is not None:
            self.log_path.write_text(logs)
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            self.container.remove(force=True)

    def logs(self) -> str:
        """The container's output so far ("" once it is gone)."""
        try:
            return bytes(self.container.logs()).decode(errors="replace")
        except (docker.errors.NotFound, docker.errors.APIError):
            return ""

    def identity(self) -> dict[str, Any]:
        image = self.image
        return {
            **super().identity(),
            "image": image.tag if image else "",
            "image_id": image.id if image else "",
            "image_digest": image.digest if image else "",
            "environment_source": "image",
        }

    def metadata(self) -> dict[str, Any]:
        image = self.image
        record: dict[str, Any] | None = None
        if image is not None:
            record = {"tag": image.tag, "id": image.id, "digest": image.digest}
            record["labels"] = image.labels
        return {**super().metadata(), "image": record}


class DockerLauncher:
    """Agents as containers from their images (Launcher)."""

    kind = LauncherKind.DOCKER

    def __init__(self, settings: LaunchSettings) -> None:
        if settings.image_for is None:
            raise ValueError("the Docker launcher needs an image_for (images/build.py)")
        self.settings = settings
        self.image_for = settings.image_for

    def start(
        self,
        manifest: AgentManifest,
        instance: str,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
    ) -> AgentHandle:
        if extra_environment:  # a rank of a world: its peers must reach it (docs/distributed.md)
            raise AgentUnavailable(
                f"{instance}: ranks of a distributed world run as local processes for now; "
                "Docker containers on a Docker network are not built yet"
            )
        return start_docker(
            manifest,
            self.image_for(manifest),
            self.settings.run_id,
            self.settings.log_dir,
            timeout_seconds=self.settings.start_timeout_seconds,
            threads=threads,
            cpuset=self.settings.cpuset,
            instance=instance,
            limits=ContainerLimits(self.settings.memory, self.settings.pids_limit),
        )

    def close(self) -> None:
        remove_run_containers(self.settings.run_id)


def start_docker(
    manifest: AgentManifest,
    image: ImageInfo,
    run_id: str,
    log_dir: Path,
    timeout_seconds: float = START_TIMEOUT_SECONDS,
    threads: int = 0,
    cpuset: str = "",
    instance: str = "",
    limits: ContainerLimits | None = None,
) -> ContainerAgent:
    """Starts the agent's container from `image` and waits until its health service says
    SERVING. `threads` > 0 sets FWBENCH_THREADS; `cpuset` ("0-1", "0,2") pins the container's
    CPUs; `instance` names a further instance of the agent (NAME#2). Raises AgentUnavailable
    (the container is removed first) or DockerUnavailable."""
    name = instance or manifest.name
    client = docker_client()
    suffix = f"-threads{threads}" if threads else ""
    grpc_port, metrics_port = f"{manifest.grpc_port}/tcp", f"{manifest.metrics_port}/tcp"
    refuse_if_closed(run_id, name)
    container = _run_container(
        client,
        manifest,
        image.id,
        f"fwbench-{run_id}-{name.replace('#', '-')}{suffix}",
        labels={RUN_LABEL: run_id, HOST_LABEL: socket.gethostname(), PID_LABEL: str(os.getpid())},
        environment={**manifest.env, **({"FWBENCH_THREADS": str(threads)} if threads else {})},
        cpuset=cpuset,
        limits=limits or ContainerLimits(),
    )
    handle = ContainerAgent(
        name=name,
        address="",
        client=AgentClient(name, "unset"),
        manifest=manifest,
        threads=threads,
        log_path=log_dir / f"{name}{suffix}.log",
        container=container,
        image=image,
    )
    try:
        refuse_if_closed(run_id, name)  # the run ended (Ctrl-C) while this one was created
        container.reload()
        handle.host_pid = int(container.attrs["State"].get("Pid") or 0)
        handle.address = f"127.0.0.1:{_host_port(container, grpc_port)}"
        if manifest.metrics_port:  # 0: an image that declares no /metrics
            handle.metrics_address = f"127.0.0.1:{_host_port(container, metrics_port)}"
        handle.client = AgentClient(name, handle.address)
        handle.client.wait_healthy(timeout_seconds, alive=handle.alive)
        handle.host_pid = _agent_pid(container) or handle.host_pid
    except BaseException:
        handle.stop()
        raise
    return handle


@dataclass(frozen=True)
class ContainerLimits:
    """What one agent container may use: memory (Docker's syntax, "8g"; "" = the default
    share of the host) and processes (threads included)."""

    memory: str = ""
    pids_limit: int = DEFAULT_PIDS_LIMIT


def _default_memory() -> int:
    return int(psutil.virtual_memory().total * DEFAULT_MEMORY_SHARE)


def _agent_pid(container: Any) -> int:
    """The agent's process id as this host sees it: the container's main process is the
    init (tini), the agent its child (fwbench-agent in the repository's images; in an image
    that declares itself, whatever its entrypoint started). 0 when `docker top` does not
    tell."""
    try:
        top = container.top()
    except docker.errors.APIError:
        return 0
    titles = top.get("Titles") or []
    if "PID" not in titles or "CMD" not in titles:
        return 0
    pid, cmd = titles.index("PID"), titles.index("CMD")
    children = [row for row in top.get("Processes") or [] if "docker-init" not in row[cmd]]
    found = [row for row in children if "fwbench-agent" in row[cmd]] or children[:1]
    return int(found[0][pid]) if found else 0


def _run_container(
    client: docker.DockerClient,
    manifest: AgentManifest,
    image_id: str,
    name: str,
    labels: dict[str, str],
    environment: dict[str, str],
    cpuset: str,
    limits: ContainerLimits,
) -> Any:
    """Creates and starts the container; its ports go to 127.0.0.1 on ports the daemon picks
    (a one-element binding is the host address alone)."""
    ports = [f"{port}/tcp" for port in (manifest.grpc_port, manifest.metrics_port) if port]
    loopback: dict[str, Any] = {port: ("127.0.0.1",) for port in ports}
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
        )
    except docker.errors.APIError as error:
        raise AgentUnavailable(f"docker refused container {name}: {error}") from None


def _host_port(container: Any, port: str) -> str:
    bindings = container.ports.get(port) or []
    if not bindings:
        raise AgentUnavailable(f"container {container.name} has no published port {port}")
    return str(bindings[0]["HostPort"])


__all__ = [
    "HOST_LABEL",
    "PID_LABEL",
    "RUN_LABEL",
    "ContainerAgent",
    "DockerLauncher",
    "remove_orphans",
    "remove_run_containers",
    "start_docker",
]
