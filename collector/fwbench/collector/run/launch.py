"""Starting (or attaching) a run's agents side by side, and checking that an attached agent
is what its NAME@ says."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from rich.console import Console

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.agent_environment import check_reported, for_agents
from fwbench.collector.agents.docker_engine import ImageInfo, docker_client
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import AgentSpecError, Instance
from fwbench.collector.images.build import ensure_image, image_tag
from fwbench.collector.launchers import (
    LAUNCHERS,
    AgentHandle,
    Launcher,
    LauncherKind,
    LaunchSettings,
    launcher_for,
)
from fwbench.collector.launchers.attached import attach
from fwbench.collector.launchers.world import attach_world, start_world
from fwbench.collector.run.combine import combine
from fwbench.collector.run.options import RunOptions
from fwbench.collector.run.prometheus_targets import TargetsFile
from fwbench.collector.run.work import AgentWork


def make_launcher(
    options: RunOptions,
    run_id: str,
    log_dir: Path,
    console: Console,
    out_dir: Path | None = None,
) -> Launcher:
    """The launcher options.launcher names; the Docker one builds stale images of agents
    declared by manifest files before use, and runs images that declare themselves as they
    are, the user's model file (--model) mounted read-only at its own path and the run
    folder's models/ (its exports, its copy of --inputs) beside it. What killed collectors on
    this host left of this launcher's kind goes first."""
    launch = options.launch
    LAUNCHERS[launch.launcher].sweep_orphans()
    image_for = None
    if launch.launcher == LauncherKind.DOCKER:
        client = docker_client()

        def image_for(manifest: AgentManifest) -> ImageInfo:
            if manifest.image is not None:
                return manifest.image
            return ensure_image(client, manifest, console.print)

    settings = LaunchSettings(
        run_id=run_id,
        log_dir=log_dir,
        report=console.print,
        start_timeout_seconds=options.limits.start_timeout_seconds,
        options=launch.own,
        image_for=image_for,
        image_tag=image_tag,
        environment=for_agents(launch.agent_environment),
        mounts=model_mounts(options, out_dir),
    )
    return launcher_for(launch.launcher, settings)


def model_mounts(options: RunOptions, out_dir: Path | None) -> list[tuple[Path, bool]]:
    """What a container needs of --model: the file, read-only, and (with --export or
    --inputs) the run folder's models/, made now, writable where an agent exports into it.
    An image's agent runs as its own user (10001), not the collector's: with --export the
    folder is writable by any user, with the sticky bit (mode 1777, as /tmp), so that a
    container writes its export there and the collector's user can still remove it."""
    model = options.model
    if model is None:
        return []
    mounts = [(model.path, False)]
    if out_dir is not None and (model.export or model.sample is not None):
        folder = (out_dir / "models").absolute()
        folder.mkdir(parents=True, exist_ok=True)
        if model.export:
            folder.chmod(0o1777)
        mounts.append((folder, model.export))
    return mounts


def launch_all(
    instances: Sequence[Instance],
    manifests: dict[str, AgentManifest],
    launcher: Launcher,
    timeout: float,
    security: ChannelSecurity | None = None,
    options: RunOptions | None = None,
    sizing: Sequence[Instance] = (),
) -> list[AgentHandle]:
    """Starts or attaches every agent side by side; on any failure stops those started and
    re-raises. `sizing`: every instance of the run, when `instances` are some of them (a
    rank's CPUs are the same in every world: rank_threads)."""

    per_rank = rank_threads(sizing or instances, options)
    reach = min(timeout, 10.0)

    def one(instance: Instance) -> AgentHandle:
        if instance.attached and instance.ranks:
            return attach_world(
                instance, combine, lambda rank, address: attach(rank, address, reach, security)
            )
        if instance.attached:
            return attach(instance, instance.address, reach, security)
        manifest = manifests[instance.agent]
        if instance.ranks:
            threads = per_rank * (1 if scheduled_threads(options) else instance.devices)
            return start_world(launcher, manifest, instance, threads, combine)
        return launcher.start(manifest, instance, 0)

    with ThreadPoolExecutor(max_workers=len(instances)) as pool:
        futures = [pool.submit(one, instance) for instance in instances]
    handles, errors = [], []
    for future in futures:
        try:
            handles.append(future.result())
        except Exception as error:  # noqa: BLE001 (collected, re-raised below)
            errors.append(error)
    if errors:
        for handle in handles:
            handle.stop()
        raise errors[0]
    return handles


def check_identity(handle: AgentHandle, describe: agent_pb2.DescribeResponse) -> None:
    """An attached agent is what its NAME@ says, and an agent from an image that declares
    itself is the agent its label names, or the run is refused (AgentSpecError) before
    anything is written: rows are labelled with NAME, so a wrong one would mislabel them."""
    said, actual = handle.instance.agent, describe.identity.name
    image = handle.manifest.image if handle.manifest is not None else None
    if (handle.kind != "attached" and image is None) or said == actual:
        return
    what = describe.identity
    told = f"({what.framework} {what.framework_version}, variant {what.variant or '-'})"
    if image is not None:
        raise AgentSpecError(
            f"image {image.tag or image.id} declares agent {said!r} (label fwbench.manifest), "
            f"but the agent in it says it is {actual!r} {told}; the label and the agent's "
            "Describe must name it alike"
        )
    raise AgentSpecError(
        f"the agent at {handle.address} is {actual!r} {told}, not {said!r}; attach it as "
        f"{actual}@{handle.address}"
    )


def adopt(
    handles: Sequence[AgentHandle],
    launcher: Launcher,
    targets: TargetsFile | None,
    environment: Mapping[str, str],
) -> list[AgentWork]:
    """The started agents as the run's work: each checked (check_identity; one the collector
    started: that its process runs with `environment`, --agent-env), its /metrics found, with
    a way to start it afresh; published to Prometheus (FWBENCH_PROMETHEUS_TARGETS), fresh
    instances included."""
    work = []
    for handle in handles:
        restart = None
        if handle.manifest is not None:
            restart = restarter(handle.manifest, launcher, handle.instance, handle.threads)
        describe = handle.client.describe()
        check_identity(handle, describe)
        if handle.manifest is not None:  # started by the collector
            check_reported(handle.name, environment, describe.environment)
        find_metrics(handle, describe)
        work.append(
            AgentWork(handle, describe, [], targets.follow(restart) if targets else restart)
        )
    if targets is not None:
        targets.put(*handles)
    return work


def find_metrics(handle: AgentHandle, describe: agent_pb2.DescribeResponse) -> None:
    """An attached agent's /metrics: its own port (Describe), on the host the collector reaches
    it at; for an attached world, each rank's."""
    for one, said in [(handle, describe)] + [
        (rank, None) for rank in getattr(handle, "ranks", []) if not rank.metrics_address
    ]:
        port = (said or one.client.describe()).metrics_port
        if not one.metrics_address and port:
            one.metrics_address = f"{one.address.rpartition(':')[0]}:{port}"


def scheduled_threads(options: RunOptions | None) -> int:
    """What a scheduler gives each rank (--k8s cpus=N, the pod's; --slurm cpus-per-task=N),
    0 when it is not said."""
    return options.launch.own.threads_per_rank() if options is not None else 0


def rank_threads(instances: Sequence[Instance], options: RunOptions | None = None) -> int:
    """Threads (and CPUs) of every rank of every world in the run: on a scheduler, what each
    rank is given (scheduled_threads); otherwise this host's usable CPUs shared by the
    largest world's replicas, so a replica has the same resources in every world size (weak
    scaling: 2 CPUs and --world-sizes 1,2 give each rank one; a 1xD process gets D times a
    replica's)."""
    largest = max((i.ranks * i.devices for i in instances), default=0)
    return scheduled_threads(options) or max(len(os.sched_getaffinity(0)) // max(largest, 1), 1)


def restarter(
    manifest: AgentManifest, launcher: Launcher, instance: Instance, rank_threads: int = 0
) -> Callable[[int], AgentHandle]:
    """Starts a fresh instance with N threads (a world: every rank afresh, N per rank)."""
    if instance.ranks:
        return lambda threads: start_world(
            launcher, manifest, instance, threads or rank_threads, combine
        )
    return lambda threads: launcher.start(manifest, instance, threads)
