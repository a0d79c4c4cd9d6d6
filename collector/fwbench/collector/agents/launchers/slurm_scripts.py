"""The batch scripts the Slurm launcher submits (launchers/slurm.py): one agent per job, or
one job whose srun step starts every rank of a world."""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from pathlib import Path

from fwbench.collector.agents.launchers.base import orphan_seconds
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.security import AGENT_VARIABLES
from fwbench.spec import startup


def exports(variables: Mapping[str, str]) -> list[str]:
    """The batch script's first lines: the collector's PATH (for Slurm's own commands; the job
    gets no other variable of the collector's: --export=NONE), then the agent's variables
    (never the collector's secrets)."""
    path = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")
    return ["#!/bin/sh", f"export PATH={shlex.quote(path)}"] + [
        f"export {key}={shlex.quote(value)}"
        for key, value in variables.items()
        if key not in AGENT_VARIABLES
    ]


def agent_command(
    python: Path, manifest: AgentManifest, ports: Path, token_file: Path
) -> list[str]:
    """The agent, listening on every address of its node (the collector is elsewhere) behind
    the run's token, ending itself when its collector is gone."""
    return startup.AgentCommand(
        python, manifest.plugin, manifest.name, manifest.variant, host=startup.ANY_HOST,
        ports_file=ports, orphan_seconds=orphan_seconds(), token_file=token_file,
    ).argv()  # fmt: skip


def world_script(variables: Mapping[str, str], agent: list[str], folder: Path, port: int) -> str:
    """A world's batch script. It runs on the allocation's first node: a first srun step asks
    every task for its node (SLURMD_NODENAME, the name the collector reaches it by), which
    gives FWBENCH_PEERS (rank r listens on PORT+1+r, for TensorFlow's TF_CONFIG); then one
    step starts every rank with torchrun's variables taken from Slurm's, rendezvous on rank
    0's node at PORT; --kill-on-bad-exit: a rank that dies takes the step down. The script
    waits for that step and, told SIGTERM by the collector, ends it and exits 0. Both steps
    say --export=ALL: under sbatch --export=NONE, srun would otherwise start the tasks without
    the script's variables (the agent's own, such as tf-eigen's TF_ENABLE_ONEDNN_OPTS=0, and
    FWBENCH_THREADS), which a test caught."""
    task = shlex.join(agent).replace("PORTS", f"{folder}/ports-$SLURM_PROCID.json")
    rank_env = (
        "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
        f'MASTER_ADDR="$1" MASTER_PORT={port} {startup.PEERS}="$2"; exec {task}'
    )
    nodes = "srun --export=ALL -l /bin/sh -c 'echo \"$SLURMD_NODENAME\"' | sort -n"
    peers = f'awk -v base={port} \'{{ printf "%s%s:%d", (NR > 1 ? "," : ""), $2, base + NR }}\''
    lines = [
        *exports(variables),
        f"peers=$({nodes} | {peers})",
        "first=${peers%%:*}",
        "srun --export=ALL --kill-on-bad-exit=1 "
        f'/bin/sh -c {shlex.quote(rank_env)} sh "$first" "$peers" &',
        "step=$!",
        # The collector's SIGTERM (launchers/slurm_jobs.py end_jobs) ends the step and the
        # job as finished work: COMPLETED. A rank that failed ends the step, and the job, in
        # failure (srun's own exit status).
        'trap \'kill -TERM "$step"; wait "$step"; exit 0\' TERM',
        'wait "$step"',
    ]
    return "\n".join(lines) + "\n"
