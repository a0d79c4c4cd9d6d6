"""`collector run --launcher slurm --slurm OPTION`: checked before anything is submitted
(docs/cluster.md)."""

from __future__ import annotations

import typer

from fwbench.collector.agents.launchers import LauncherKind
from fwbench.collector.agents.launchers.slurm import RESERVED

# sbatch options that the shape of what runs sets: one would contradict it (--slurm ntasks=1
# once silently made a world of 2 one task).
SHAPED = {"ntasks": "is what the world size says (--world-sizes; an agent alone is one task)"}


def check_slurm_options(given: list[str], launcher: LauncherKind) -> tuple[str, ...]:
    """--slurm options: sbatch long options without their dashes; not the launcher's own."""
    if given and launcher != LauncherKind.SLURM:
        raise typer.BadParameter("--slurm options go with --launcher slurm", param_hint="--slurm")
    for option in given:
        name = option.partition("=")[0]
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
