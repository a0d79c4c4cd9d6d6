"""What every command shares: the two consoles (results on stdout, progress and errors on
stderr), the options several commands take, and the one table from error to exit code."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path
from typing import Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from fwbench.collector.agents.client import AgentUnavailable, IncompatibleAgent
from fwbench.collector.agents.docker_engine import DockerUnavailable
from fwbench.collector.agents.environments import EnvironmentBuildError
from fwbench.collector.agents.existing import EnvironmentUnsuitable
from fwbench.collector.agents.locks import LockError
from fwbench.collector.agents.manifest import (
    AgentManifest,
    ManifestError,
    discover_manifests,
    manifest_dirs,
)
from fwbench.collector.agents.scratch import mark_logs, move_logs, scratch_folder
from fwbench.collector.agents.security import SecurityError
from fwbench.collector.agents.specs import AgentSpecError
from fwbench.collector.analysis.contenders import ComparisonError
from fwbench.collector.images.build import ImageBuildError
from fwbench.collector.launchers import LauncherKind
from fwbench.collector.run.plan import SelectionError
from fwbench.collector.run.session import DEFAULT_OUT
from fwbench.collector.store import PersistenceError, StorageUnusable, default_store_path
from fwbench.collector.store.merge import MergeRefused
from fwbench.collector.store.owner import ResumeRefused


class ExitCode(IntEnum):
    """What every `collector` command exits with."""

    OK = 0  # everything asked for was done (cells unsupported by an agent included)
    FAILED = 1  # some of the work failed (cells, image builds) or results could not be saved
    NOT_STARTED = 2  # bad input, an unusable store or run folder, or agents, environments,
    # images or Docker unavailable
    NONCONFORMING = 3  # `collector conformance`: the agent failed a check of the protocol
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; what was measured is kept


# The one table: an error a command catches -> its exit code (looked up along the MRO).
EXIT_CODES: dict[type[Exception], ExitCode] = {
    SelectionError: ExitCode.NOT_STARTED,
    AgentSpecError: ExitCode.NOT_STARTED,
    ManifestError: ExitCode.NOT_STARTED,
    ComparisonError: ExitCode.NOT_STARTED,
    AgentUnavailable: ExitCode.NOT_STARTED,
    IncompatibleAgent: ExitCode.NOT_STARTED,
    EnvironmentBuildError: ExitCode.NOT_STARTED,
    EnvironmentUnsuitable: ExitCode.NOT_STARTED,
    LockError: ExitCode.NOT_STARTED,
    ImageBuildError: ExitCode.NOT_STARTED,
    DockerUnavailable: ExitCode.NOT_STARTED,
    ResumeRefused: ExitCode.NOT_STARTED,
    SecurityError: ExitCode.NOT_STARTED,
    StorageUnusable: ExitCode.NOT_STARTED,
    MergeRefused: ExitCode.NOT_STARTED,
    PersistenceError: ExitCode.FAILED,
}
KNOWN_ERRORS = tuple(EXIT_CODES)

# Results go to stdout (pipeable); progress, notices and errors to stderr.
console = Console(width=None if sys.stdout.isatty() else 160)
# A log (stderr not a terminal) keeps each line whole: no break inside a figure at column 80.
errors = Console(stderr=True, soft_wrap=not sys.stderr.isatty())

ManifestDirs = Annotated[
    list[Path] | None,
    typer.Option("--manifests", help="Extra folder of agent manifests (repeatable)."),
]
StorePath = Annotated[
    Path | None,
    typer.Option(
        "--store",
        help="Results store (default: $FWBENCH_STORE or ~/.local/share/fwbench/results.sqlite).",
    ),
]
Pythons = Annotated[
    list[str] | None,
    typer.Option(
        "--python",
        metavar="[AGENT=]PATH",
        help="local, slurm: run agents with an existing Python (a conda or cluster environment "
        "that already has the framework) instead of a virtual environment the collector "
        "makes; AGENT=PATH for one agent (repeatable). Nothing is installed there: the "
        "agent's own packages go on its PYTHONPATH, and what is missing is refused up "
        "front with the command to install it.",
    ),
]
LauncherOption = Annotated[
    LauncherKind,
    typer.Option(
        "--launcher",
        help="How agents given by name start: local (a virtual environment each), docker "
        "(a container each, from its image, built when missing or stale; an image given "
        "by reference is run as it is, never built), slurm or kubernetes (docs/cluster.md).",
    ),
]
Cpuset = Annotated[
    str, typer.Option(help="docker: CPUs each container is pinned to, e.g. 0-1 or 1.")
]
Memory = Annotated[
    str, typer.Option(help="docker: each container's memory limit, e.g. 8g (default 90%).")
]
PidsLimit = Annotated[
    int, typer.Option(min=64, help="docker: each container's process and thread limit.")
]


SlurmOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--slurm",
        metavar="OPTION[=VALUE]",
        help="slurm: an sbatch option for every agent job, without the dashes (repeatable): "
        "partition=NAME, account=NAME, time=HH:MM:SS, constraint=FEATURES, exclusive, "
        "cpus-per-task=N, gres=gpu:1, ...; "
        "AGENT:OPTION for that agent's jobs alone (torch-cu12:partition=gpu).",
    ),
]
K8sOptions = Annotated[
    list[str] | None,
    typer.Option(
        "--k8s",
        metavar="KEY=VALUE",
        help="kubernetes: namespace=NAME (default: default), registry=PREFIX of the agents' "
        "images (registry.example.org/), cpus=N and memory=SIZE per pod (requests = limits; "
        "default 1 and 4Gi); repeatable.",
    ),
]
AgentEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--agent-env",
        metavar="NAME=VALUE",
        help="A variable every agent the run starts gets, with any launcher (repeatable): an "
        "allocator (LD_PRELOAD=..., MALLOC_ARENA_MAX=1), threads (OMP_NUM_THREADS=4), compiler "
        "flags (XLA_FLAGS=...). Each agent must report it back; every row records it "
        "(column environment), so not for secrets. Not with attached agents, nor for what an "
        "agent's manifest or the collector sets (TF_ENABLE_ONEDNN_OPTS, --threads).",
    ),
]
JsonOutput = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def fail(message: str, code: ExitCode = ExitCode.NOT_STARTED) -> NoReturn:
    errors.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(int(code))


def fail_with(error: Exception, suffix: str = "") -> NoReturn:
    """Exits with the code EXIT_CODES gives the error's type."""
    code = next((EXIT_CODES[t] for t in type(error).__mro__ if t in EXIT_CODES), ExitCode.FAILED)
    fail(f"{error}{suffix}", code)


P = ParamSpec("P")
R = TypeVar("R")


def reads_store(command: Callable[P, R]) -> Callable[P, R]:
    """A command that reads the store (its `store` option): a store that cannot be read
    (damaged, not a store) ends it with one line that says so, naming the file and SQLite's
    reason, exit 2; never a traceback."""

    @functools.wraps(command)
    def reading(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return command(*args, **kwargs)
        except StorageUnusable as error:
            fail_with(error)
        except sqlite3.Error as error:
            path = kwargs.get("store") or default_store_path()
            fail(f"cannot read the results store {path}: SQLite says: {error}")

    return reading


def load_manifests(extra: list[Path] | None) -> dict[str, AgentManifest]:
    try:
        return discover_manifests(manifest_dirs(extra))
    except ManifestError as error:
        fail_with(error)


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str))


def take_interrupts_once() -> None:
    """SIGINT (Ctrl-C) and SIGTERM raise KeyboardInterrupt once, where the command is, so that
    it stops and cleans up: cancels the running cell, stops the agents it started, removes its
    temporary folders. Another one during that cleanup, or while the interpreter exits, is
    noted and ignored, never raised: it would cut the cleanup short and leave agents and
    temporary folders behind (or kill the process as it exits). SIGKILL still ends the command
    at once. A SIGINT ignored from the start (a background job) stays ignored."""
    taken = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        taken.append(signal.SIGINT)

    def again(signum: int, frame: object) -> None:
        os.write(2, b"stopping the agents and removing temporary folders; SIGKILL abandons them\n")

    def ignore() -> None:  # Python puts back default handlers as it exits, not ignored ones
        for taken_signal in taken:
            signal.signal(taken_signal, signal.SIG_IGN)

    def first(signum: int, frame: object) -> None:
        for taken_signal in taken:
            signal.signal(taken_signal, again)
        atexit.register(ignore)
        raise KeyboardInterrupt

    for taken_signal in taken:
        signal.signal(taken_signal, first)


@contextlib.contextmanager
def command_logs(command: str) -> Iterator[Path]:
    """The agents' logs folder of `collector COMMAND` (describe, conformance: no run folder).
    On every way out its logs are moved to fwbench-results/logs/COMMAND-STAMP/ and named on
    stderr; a killed command's are moved there by the next command (agents/scratch.py); where
    they cannot be moved (a read-only folder), where they stay is said. An attached agent
    leaves no log: nothing is written."""
    logs = scratch_folder("logs")
    target = DEFAULT_OUT / "logs" / f"{command}-{time.strftime('%Y%m%d-%H%M%S')}"
    mark_logs(logs, target, make=True)
    try:
        yield logs
    finally:
        try:
            for log in move_logs(logs, target):
                errors.print(f"agent log kept: {escape(str(log))}", highlight=False)
        except OSError as error:
            errors.print(f"warning: agent logs left in {escape(str(logs))} ({error})")
