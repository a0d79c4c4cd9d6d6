"""`collector run --launcher slurm --slurm OPTION`: checked before anything is submitted
(docs/cluster.md)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated

import typer

from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import LauncherKind
from fwbench.collector.launchers.slurm import RESERVED
from fwbench.collector.launchers.slurm_jobs import scoped
from fwbench.collector.launchers.slurm_scripts import Container

# sbatch options that the shape of what runs sets: one would contradict it (--slurm ntasks=1
# once silently made a world of 2 one task).
SHAPED = {"ntasks": "is what the world size says (--world-sizes; an agent alone is one task)"}
# Options another of the run's own does right.
REPLACED = {
    "container": "would start the host environment's interpreter inside an OCI bundle, which "
    "holds no such path: run agents in their images with --slurm-container RUNTIME=REGISTRY",
}
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
        if name in REPLACED:
            raise typer.BadParameter(f"--{name} {REPLACED[name]}", param_hint="--slurm")
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


SlurmContainer = Annotated[
    str,
    typer.Option(
        metavar="RUNTIME=REGISTRY",
        help="slurm: run each agent in its image (`collector images build` makes them; push "
        "them where the nodes pull from), never in the host's environment: "
        "apptainer=docker://registry.example.org/ (apptainer exec) or "
        "pyxis=registry.example.org# (srun --container-image, enroot). docs/cluster.md",
    ),
]


def check_slurm_container(given: str, launcher: LauncherKind, pythons: list[str] | None) -> str:
    """--slurm-container, checked: with --launcher slurm, without --python, RUNTIME=REGISTRY."""
    if not given:
        return ""
    hint = "--slurm-container"
    if launcher != LauncherKind.SLURM:
        raise typer.BadParameter("it goes with --launcher slurm", param_hint=hint)
    if pythons:
        raise typer.BadParameter(
            "an agent runs in its image or in an existing Python (--python), not both",
            param_hint=hint,
        )
    try:
        Container.parse(given)
    except ValueError as error:
        raise typer.BadParameter(str(error), param_hint=hint) from None
    return given
