"""`collector run --launcher slurm --slurm OPTION`: checked before anything is submitted
(docs/cluster.md)."""

from __future__ import annotations

from collections.abc import Collection

import typer

from fwbench.collector.agents.launchers import LauncherKind
from fwbench.collector.agents.launchers.slurm import RESERVED
from fwbench.collector.agents.launchers.slurm_jobs import scoped
from fwbench.collector.agents.specs import Instance

# sbatch options that the shape of what runs sets: one would contradict it (--slurm ntasks=1
# once silently made a world of 2 one task).
SHAPED = {"ntasks": "is what the world size says (--world-sizes; an agent alone is one task)"}
# Options the run reads for every agent at once: one agent's own would leave the others' wrong.
PER_RUN = {"cpus-per-task": "sizes every rank's threads in the run (--world-sizes)"}


def check_slurm_options(
    given: list[str], launcher: LauncherKind, agents: Collection[str] = ()
) -> tuple[str, ...]:
    """--slurm options: sbatch long options without their dashes, for every agent or, as
    AGENT:OPTION, for one of `agents` (the agents the run names); not the launcher's own."""
    if given and launcher != LauncherKind.SLURM:
        raise typer.BadParameter("--slurm options go with --launcher slurm", param_hint="--slurm")
    for option in given:
        agent, option = scoped(option)
        if agent and agent not in agents:
            raise typer.BadParameter(
                f"{agent}:{option}: {agent} is not an agent of this run "
                f"({', '.join(sorted(agents)) or 'none'})",
                param_hint="--slurm",
            )
        name = option.partition("=")[0]
        if agent and name in PER_RUN:
            raise typer.BadParameter(
                f"{agent}:{option}: --{name} {PER_RUN[name]}: give it for every agent",
                param_hint="--slurm",
            )
        if not name or not name.replace("-", "").isalnum():
            raise typer.BadParameter(
                f"{option!r}: expected NAME or NAME=VALUE", param_hint="--slurm"
            )
        if name in SHAPED:
            raise typer.BadParameter(
                f"--{name} {SHAPED[name]}, so it cannot be given", param_hint="--slurm"
            )
        if name in RESERVED:
            raise typer.BadParameter(
                f"--{name} is the launcher's own (it names, logs and tracks each job)",
                param_hint="--slurm",
            )
    return tuple(given)


def agent_names(agents: str) -> set[str]:
    """The declared agents an --agents text names (NAME#2, NAME@ADDRESS: NAME)."""
    return {Instance.parse(spec.strip()).agent for spec in agents.split(",") if spec.strip()}
