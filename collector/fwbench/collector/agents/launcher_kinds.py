"""The launcher kinds (`collector run --launcher`) and the container defaults the CLI's options
show, without the launchers themselves: launchers/__init__.py registers every launcher (Docker,
Kubernetes, Slurm, local), so importing anything from that package imports them all. Here,
below launchers/, the CLI's option declarations name them lightly (`collector --help`);
launchers/base.py re-exports them, the names everything else uses."""

from __future__ import annotations

from enum import StrEnum

DEFAULT_PIDS_LIMIT = 4096  # processes and threads of one container; XLA and torch need hundreds


class LauncherKind(StrEnum):
    """How agents given by name are started (`collector run --launcher`)."""

    LOCAL = "local"  # a process in the agent's own virtual environment
    DOCKER = "docker"  # a container from the agent's image
    SLURM = "slurm"  # a Slurm batch job on a node Slurm chooses
    KUBERNETES = "kubernetes"  # an Indexed Job's pod on a node Kubernetes chooses
