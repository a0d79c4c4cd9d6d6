"""The batch scripts the Slurm launcher submits (launchers/slurm.py): one agent per job, or
one job whose srun step starts every rank of a world."""

from __future__ import annotations

import os
import random
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.security import AGENT_VARIABLES
from fwbench.collector.launchers.base import orphan_seconds
from fwbench.spec import startup

if TYPE_CHECKING:  # cryptography is imported only by a cluster launcher's start
    from fwbench.collector.agents.run_tls import RunFiles


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
    python: Path, manifest: AgentManifest, ports: Path, credentials: RunFiles
) -> list[str]:
    """The agent, listening on every address of its node (the collector is elsewhere) behind
    the run's token, over TLS with the run's certificate, ending itself when its collector is
    gone."""
    return startup.AgentCommand(
        python,
        manifest.plugin,
        manifest.name,
        manifest.variant,
        host=startup.ANY_HOST,
        ports_file=ports,
        orphan_seconds=orphan_seconds(),
        token_file=credentials.token,
        tls_cert=credentials.cert,
        tls_key=credentials.key,
    ).argv()


def agent_script(
    variables: Mapping[str, str],
    agent: list[str],
    container: Container | None = None,
    image: str = "",
    folders: Sequence[Path] = (),
    gpu: bool = False,
) -> str:
    """One agent's batch script: the agent itself (exec: SIGTERM reaches it, it exits 0), under
    Apptainer in its image, or as a step in its image (Pyxis starts containers from srun)."""
    if container is None:
        return "\n".join([*exports(variables), "exec " + shlex.join(agent)]) + "\n"
    if container.runtime == "apptainer":
        command = "exec " + shlex.join([*container.apptainer(image, folders, gpu), *agent])
        return "\n".join([*exports(variables), command]) + "\n"
    step = shlex.join(["srun", "--export=ALL", *container.pyxis(image, folders), *agent])
    return "\n".join([*exports(variables), *until_ended(step)]) + "\n"


# Where the kernel picks the ports of outgoing connections (Linux's default), which a node
# may be using however quiet it is: a world's ports are chosen below it.
EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 20000


def blind_port(span: int) -> int:
    """The first of `span` consecutive ports for a world on nodes the collector cannot probe:
    random in [LOWEST_PORT, the ephemeral range's start), this host's range standing for the
    nodes'. Still a guess: a taken port fails the world's start with "Address already in use"
    and the world is placed again (world.py)."""
    try:
        first = int(EPHEMERAL_PORTS.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32768
    top = max(first - span, LOWEST_PORT + 1000)
    return random.randint(LOWEST_PORT, top)


def world_script(
    variables: Mapping[str, str],
    agent: list[str],
    folder: Path,
    port: int,
    container: Container | None = None,
    image: str = "",
    gpu: bool = False,
    token_folder: Path | None = None,
) -> str:
    """A world's batch script. It runs on the allocation's first node: a first srun step asks
    every task for its node (SLURMD_NODENAME, the name the collector reaches it by), which
    gives FWBENCH_PEERS (rank r listens on PORT+1+r, for TensorFlow's TF_CONFIG); then one
    step starts every rank with torchrun's variables taken from Slurm's, rendezvous on rank
    0's node at PORT; --kill-on-bad-exit: a rank that dies takes the step down. The script
    waits for that step and, told SIGTERM by the collector, ends it (until_ended). Both steps
    say --export=ALL: under sbatch --export=NONE, srun would otherwise start the tasks without
    the script's variables (the agent's own, such as tf-eigen's TF_ENABLE_ONEDNN_OPTS=0, and
    FWBENCH_THREADS), which a test caught."""
    inside: list[str] = []
    folders = [folder, *([token_folder] if token_folder else [])]
    if container is not None and container.runtime == "apptainer":
        agent = [*container.apptainer(image, folders, gpu), *agent]
    elif container is not None:
        inside = container.pyxis(image, folders)
    task = shlex.join(agent).replace("PORTS", f"{folder}/ports-$SLURM_PROCID.json")
    # Each rank's shell stays as the task, waiting on the agent: when the agent ends by itself
    # it writes the agent's status to the folder (exit-RANK), which tells the script a rank
    # died; the step's end kills the shell first (the collector's SIGTERM), so then none does.
    rank_env = (
        "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
        f'MASTER_ADDR="$1" MASTER_PORT={port} {startup.PEERS}="$2"; {task}; status=$?; '
        f"echo $status > {shlex.quote(str(folder))}/exit-$SLURM_PROCID; exit $status"
    )
    nodes = "srun --export=ALL -l /bin/sh -c 'echo \"$SLURMD_NODENAME\"' | sort -n"
    peers = f'awk -v base={port} \'{{ printf "%s%s:%d", (NR > 1 ? "," : ""), $2, base + NR }}\''
    lines = [
        *exports(variables),
        f"peers=$({nodes} | {peers})",
        "first=${peers%%:*}",
        *until_ended(
            shlex.join(["srun", "--export=ALL", "--kill-on-bad-exit=1", *inside])
            + f' /bin/sh -c {shlex.quote(rank_env)} sh "$first" "$peers"',
            exits=folder,
        ),
    ]
    return "\n".join(lines) + "\n"


# The agent's interpreter inside its image (images/dockerfile.py makes the venv there).
IMAGE_PYTHON = Path("/opt/fwbench/venv/bin/python")
RUNTIMES = ("apptainer", "pyxis")


@dataclass(frozen=True)
class Container:
    """How a Slurm job runs the agent in its image (`--slurm-container RUNTIME=REGISTRY`): with
    Apptainer (`apptainer exec IMAGE ...`, the image named by any URI Apptainer reads:
    docker://registry.example.org/fwbench/torch-cpu:latest) or with Pyxis and enroot (srun's
    --container-image, enroot's registry#image form). The job's folder for ports and token
    is mounted at the same path; the home folder is not."""

    runtime: str
    registry: str

    @classmethod
    def parse(cls, text: str) -> Container:
        """RUNTIME=REGISTRY; raises ValueError with what is wrong."""
        runtime, equals, registry = text.partition("=")
        if runtime not in RUNTIMES:
            raise ValueError(f"{text!r}: the runtime is one of {', '.join(RUNTIMES)}")
        if not equals or not registry:
            example = (
                "docker://registry.example.org/"
                if runtime == "apptainer"
                else ("registry.example.org#")
            )
            raise ValueError(f"{text!r}: say where the images are: {runtime}={example}")
        return cls(runtime, registry)

    def apptainer(self, image: str, folders: Sequence[Path], gpu: bool) -> list[str]:
        """The words before the agent's command under Apptainer: its own namespaces, the host's
        network (the collector reaches the agent at the node's address), the job's
        environment (the job has only the agent's variables: sbatch --export=NONE), `folders`
        (the ports files', the token's) at their own paths, the first the working folder."""
        return [
            "apptainer",
            "exec",
            "--no-home",
            "--bind",
            _mounts(folders),
            "--pwd",
            str(folders[0]),
            *(["--nv"] if gpu else []),
            image,
        ]

    def pyxis(self, image: str, folders: Sequence[Path]) -> list[str]:
        """srun's options that put a step's tasks in the image (Pyxis)."""
        return [
            f"--container-image={image}",
            f"--container-mounts={_mounts(folders)}",
            "--no-container-mount-home",
            f"--container-workdir={folders[0]}",
        ]


def _mounts(folders: Sequence[Path]) -> str:
    return ",".join(f"{folder}:{folder}" for folder in dict.fromkeys(folders))


@dataclass(frozen=True)
class InImage:
    """--slurm-container: the agent's environment is its image's; nothing is made on the host,
    and the job starts in its ports folder (mounted in the container at the same path)."""

    python: Path
    folder: Path

    def ensure(self, report: object = None) -> None:
        pass


def until_ended(step: str, exits: Path | None = None) -> list[str]:
    """Lines that run `step` (a command line) in the background and wait for it. A step that
    ends by itself ends the job with its status (FAILED when not 0). The collector's SIGTERM
    (slurm_jobs.end_jobs) ends the step (srun then kills its tasks: its status is 137 either
    way), and the job ends as finished work (COMPLETED), unless a task had ended by itself with
    a status other than 0 (a file exit-TASK in `exits` says so; world_script): a rank that died
    just before the collector, seeing its world break, ended the job fails it (FAILED)."""
    folder = [] if exits is None else [f"exits={shlex.quote(str(exits))}"]
    ended = '[ "$(cat "$exits"/exit-* 2>/dev/null | grep -cvx 0)" = 0 ]; exit $?'
    return [
        *folder,
        f"{step} &",
        "step=$!",
        f'trap \'kill -TERM "$step"; wait "$step"; {ended if folder else "exit 0"}\' TERM',
        'wait "$step"',
    ]
