"""Docker launcher: one container per agent, from the agent's image (built or refreshed by the
caller's `image_for`, see images/build.py), with its ports published on 127.0.0.1 only (random
host ports), the GPUs requested for GPU agents, and optionally pinned to a set of CPUs.

Every container carries the run's id, this host and this collector's pid as labels. A run
removes its containers on every way out: ContainerAgent.stop() (idempotent) for each agent,
then DockerLauncher.close() for anything a Ctrl-C left half-started; remove_orphans() sweeps
what a collector killed outright (SIGKILL) left behind."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.docker_engine import ImageInfo, docker_client, docker_errors
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import (
    START_TIMEOUT_SECONDS,
    AgentHandle,
    LauncherKind,
    LaunchSettings,
    Placement,
    log_tail,
)
from fwbench.collector.launchers.docker_container import (
    ContainerLimits,
    DockerOptions,
    agent_pid,
    container_name,
    host_port,
    run_container,
    safe_name,
)
from fwbench.collector.launchers.docker_sweep import (
    HOST_LABEL,
    PID_LABEL,
    RUN_LABEL,
    create_network,
    refuse_if_closed,
    remove_orphans,
    remove_run_containers,
    run_labels,
)
from fwbench.collector.launchers.options import LauncherOptions
from fwbench.spec import startup

# Inside a world's network each rank has its own namespace: the same ports in every container.
RENDEZVOUS_PORT = 29500  # MASTER_PORT on rank 0
PEER_PORT = 29501  # each rank's own (FWBENCH_PEERS)


@dataclass
class ContainerAgent(AgentHandle):
    """An agent in a container this collector started."""

    kind: ClassVar[str] = LauncherKind.DOCKER.value
    sees_files: ClassVar[bool] = True  # the model file and models/ are mounted at their paths

    container: Any = None  # docker.models.containers.Container
    image: ImageInfo | None = None

    def alive(self) -> bool:
        try:
            self.container.reload()
        except docker_errors().NotFound:
            return False
        return bool(self.container.status == "running")

    def exit_reason(self) -> str:
        try:
            self.container.reload()
        except docker_errors().NotFound:
            return f"container {self.container.name} is gone"
        state = self.container.attrs["State"]
        if state.get("Running"):
            return "agent container is running but not answering"
        how = f"exited with code {state.get('ExitCode')}"
        if state.get("OOMKilled"):
            how = "was killed for using too much memory"
        return f"agent container {self.container.name} {how}{log_tail(self.logs())}"

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Stops (SIGTERM, SIGKILL after the grace period), keeps the log, removes. Idempotent;
        a container already gone (or being removed by the run's sweep) is no error."""
        self.client.close()
        with contextlib.suppress(docker_errors().NotFound, docker_errors().APIError):
            self.container.stop(timeout=max(1, round(grace_seconds)))
        logs = self.logs()
        if logs and self.log_path is not None:
            self.log_path.write_text(logs)
        with contextlib.suppress(docker_errors().NotFound, docker_errors().APIError):
            self.container.remove(force=True)

    def logs(self) -> str:
        """The container's output so far ("" once it is gone)."""
        try:
            return bytes(self.container.logs()).decode(errors="replace")
        except (docker_errors().NotFound, docker_errors().APIError):
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
    options: ClassVar[type[LauncherOptions]] = DockerOptions
    holds_allocation = False

    def __init__(self, settings: LaunchSettings) -> None:
        if settings.image_for is None:
            raise ValueError("the Docker launcher needs an image_for (images/build.py)")
        self.settings = settings
        self.image_for = settings.image_for
        self.own = settings.own(DockerOptions)
        self._networks: dict[Instance, str] = {}  # a world -> its network (place_world)

    def start(
        self,
        manifest: AgentManifest,
        instance: Instance,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
        abandon: threading.Event | None = None,
    ) -> AgentHandle:
        extra = dict(extra_environment or {})
        world = self._networks.get(instance.world) if extra else None
        extra = {**self.settings.environment, **extra}
        return start_docker(
            manifest,
            self.image_for(manifest),
            self.settings.run_id,
            self.settings.log_dir,
            timeout_seconds=self.settings.start_timeout_seconds,
            threads=threads,
            cpuset=extra.get(startup.CPUS) or self.own.cpuset,  # a rank: its own CPUs
            instance=instance,
            limits=self.own.limits,
            extra_environment=extra,
            network=world or "",
            abandon=abandon,
            mounts=self.settings.mounts,
        )

    def place_world(self, manifest: AgentManifest, world: Instance, threads: int) -> Placement:
        """A user-defined Docker network per world: each rank its own container (its own
        network namespace, so the same ports in each), reached by container name."""
        run_id = self.settings.run_id
        network = f"fwbench-{run_id}-{safe_name(str(world))}"
        release = create_network(docker_client(), run_id, network)
        self._networks[world] = network
        ranks = [container_name(run_id, str(world.of_rank(r))) for r in range(world.ranks)]
        return Placement(
            ranks[0],
            RENDEZVOUS_PORT,
            [f"{r}:{PEER_PORT}" for r in ranks],
            "docker-network",
            release,
        )

    def close(self) -> None:
        remove_run_containers(self.settings.run_id)

    @staticmethod
    def sweep_orphans() -> None:
        remove_orphans()


def start_docker(
    manifest: AgentManifest,
    image: ImageInfo,
    run_id: str,
    log_dir: Path,
    timeout_seconds: float = START_TIMEOUT_SECONDS,
    threads: int = 0,
    cpuset: str = "",
    instance: Instance | None = None,
    limits: ContainerLimits | None = None,
    extra_environment: Mapping[str, str] | None = None,
    network: str = "",
    abandon: threading.Event | None = None,
    mounts: Sequence[tuple[Path, bool]] = (),
) -> ContainerAgent:
    """Starts the agent's container from `image` and waits until its health service says
    SERVING. `threads` > 0 sets FWBENCH_THREADS; `cpuset` ("0-1", "0,2") pins the container's
    CPUs; `instance` is which (default: the agent alone; a further A/A copy NAME#2, a rank);
    `network` puts it on a world's network (place_world); `mounts` are host paths bound at
    the same path inside, read-only unless writable. Raises AgentUnavailable (the
    container is removed first) or DockerUnavailable."""
    instance = instance or Instance(manifest.name)
    name = str(instance)
    client = docker_client()
    suffix = f"-threads{threads}" if threads else ""
    grpc_port, metrics_port = f"{manifest.grpc_port}/tcp", f"{manifest.metrics_port}/tcp"
    refuse_if_closed(run_id, name)
    container = run_container(
        client,
        manifest,
        image.id,
        container_name(run_id, name) + suffix if not network else container_name(run_id, name),
        labels=run_labels(run_id),
        environment={
            **manifest.env,
            **startup.thread_variables(threads),
            **(extra_environment or {}),
        },
        cpuset=cpuset,
        limits=limits or ContainerLimits(),
        network=network,
        mounts=mounts,
    )
    handle = ContainerAgent(
        instance=instance,
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
        handle.address = f"127.0.0.1:{host_port(container, grpc_port)}"
        if manifest.metrics_port:  # 0: an image that declares no /metrics
            handle.metrics_address = f"127.0.0.1:{host_port(container, metrics_port)}"
        handle.client = AgentClient(name, handle.address)

        def alive() -> bool:
            if abandon is not None and abandon.is_set():
                raise AgentUnavailable(f"the start of {name} was abandoned: its world failed")
            return handle.alive()

        handle.client.wait_healthy(timeout_seconds, alive=alive, why=handle.exit_reason)
        handle.host_pid = agent_pid(container) or handle.host_pid
    except BaseException:
        handle.stop()
        raise
    return handle


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
