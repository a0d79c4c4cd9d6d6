"""Launchers: how an agent comes to exist and goes away. One module per kind, each a Launcher
(base.py) with its own AgentHandle subclass and its own options (options.py); this registry
is the only list of them. A world of rank processes (world.py; its client, world_call.py;
its watchers' scheduling class, idle_class.py) is started through any of them. A layer of
its own: above agents/ (manifests, environments, the client), below run/."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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
from fwbench.collector.launchers.options import LauncherOptions, LaunchOptionError, OptionContext
from fwbench.collector.launchers.slurm import SlurmLauncher

__all__ = [
    "DEFAULT_PIDS_LIMIT",
    "LAUNCHERS",
    "AgentHandle",
    "LaunchOptionError",
    "LaunchSettings",
    "Launcher",
    "LauncherKind",
    "LauncherOptions",
    "OptionContext",
    "launcher_for",
    "launcher_options",
    "recorded_options",
]

LAUNCHERS: dict[LauncherKind, type[Launcher]] = {
    LauncherKind.LOCAL: LocalLauncher,
    LauncherKind.DOCKER: DockerLauncher,
    LauncherKind.SLURM: SlurmLauncher,
    LauncherKind.KUBERNETES: KubernetesLauncher,
}


def launcher_for(kind: LauncherKind, settings: LaunchSettings) -> Launcher:
    return LAUNCHERS[kind](settings)


def launcher_options(
    kind: LauncherKind, given: Mapping[str, Any], context: OptionContext | None = None
) -> LauncherOptions:
    """Launcher `kind`'s own options from the command line's values of every launcher's flags
    (parameter name -> value): a flag of other launchers given a value is refused (naming the
    launchers it goes with), the rest parsed by `kind`'s options. Raises LaunchOptionError, or
    what the options' own checks raise."""
    own = LAUNCHERS[kind].options
    for parameter, value in given.items():
        takers = [k for k, launcher in LAUNCHERS.items() if parameter in launcher.options.FLAGS]
        if not takers:
            raise KeyError(f"{parameter!r} is no launcher's flag")
        flag = LAUNCHERS[takers[0]].options.FLAGS[parameter]
        if parameter not in own.FLAGS and flag.given(value):
            raise LaunchOptionError(
                flag.name, flag.refusal.format(flag=flag.name, kinds=" or ".join(takers))
            )
    return own.parse({p: given[p] for p in own.FLAGS if p in given}, context or OptionContext())


def recorded_options(kind: LauncherKind, record: Mapping[str, Any]) -> LauncherOptions:
    """Launcher `kind`'s options as a run recorded them (LauncherOptions.record)."""
    return LAUNCHERS[kind].options.from_record(record)
