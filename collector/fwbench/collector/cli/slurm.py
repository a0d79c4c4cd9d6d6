"""`collector run --launcher slurm`: its --slurm-container flag, and the agents an --agents text
names (what AGENT:OPTION in --slurm may name; launchers/slurm_options.py checks those)."""

from __future__ import annotations

from typing import Annotated

import typer


def agent_names(agents: str) -> set[str]:
    """The declared agents an --agents text names (NAME#2, NAME@ADDRESS: NAME)."""
    from fwbench.collector.agents.specs import Instance

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
