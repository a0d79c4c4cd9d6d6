"""Launchers: how an agent comes to exist and goes away. One module per kind, each a Launcher
(base.py) with its own AgentHandle subclass; this registry is the only list of them. A world
of rank processes (world.py, world_call.py) is started through any of them. A layer of its
own: above agents/ (manifests, environments, the client), below run/."""

from __future__ import annotations

from collections.abc import Callable

from fwbench.collector.launchers.base import (
    DEFAULT_PIDS_LIMIT,
    AgentHandle,
    Launcher,
    LauncherKind,
    LaunchSettings,
)
from fwbench.collector.launchers.docker import DockerLauncher
from fwbench.collector.launchers.kubernetes import KubernetesLauncher
from fwbench.collector.launchers.local import LocalLauncher
from fwbench.collector.launchers.slurm import SlurmLauncher

__all__ = [
    "DEFAULT_PIDS_LIMIT",
    "LAUNCHERS",
    "AgentHandle",
    "LaunchSettings",
    "Launcher",
    "LauncherKind",
    "launcher_for",
]

LAUNCHERS: dict[LauncherKind, Callable[[LaunchSettings], Launcher]] = {
    LauncherKind.LOCAL: LocalLauncher,
    LauncherKind.DOCKER: DockerLauncher,
    LauncherKind.SLURM: SlurmLauncher,
    LauncherKind.KUBERNETES: KubernetesLauncher,
}


def launcher_for(kind: LauncherKind, settings: LaunchSettings) -> Launcher:
    return LAUNCHERS[kind](settings)
