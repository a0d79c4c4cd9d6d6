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
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from fwbench.collector.agents.launcher_kinds import LauncherKind

if TYPE_CHECKING:
    from fwbench.collector.agents.manifest import AgentManifest


class ExitCode(IntEnum):
    """What every `collector` command exits with."""

    OK = 0  # everything asked for was done (cells unsupported by an agent included)
    FAILED = 1  # some of the work failed (cells, image builds) or results could not be saved
    NOT_STARTED = 2  # bad input, an unusable store or run folder, or agents, environments,
    # images or Docker unavailable
    NONCONFORMING = 3  # `collector conformance`: the agent failed a check of the protocol
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; what was measured is kept


# The one table: an error a command catches -> its exit code, looked up along the error's MRO.
# Keyed by the classes' qualified names (where each is defined), so that `collector --help`
# imports none of the modules that raise them (tests/collector/test_startup_imports.py);
# tests/collector/test_cli_conventions.py checks that every name is a class that exists.
EXIT_CODES: dict[str, ExitCode] = {
    "fwbench.collector.run.shapes.SelectionError": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.specs.AgentSpecError": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.manifest.ManifestError": ExitCode.NOT_STARTED,
    "fwbench.collector.analysis.contenders.ComparisonError": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.client.AgentUnavailable": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.client.IncompatibleAgent": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.environments.EnvironmentBuildError": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.existing.EnvironmentUnsuitable": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.locks.LockError": ExitCode.NOT_STARTED,
    "fwbench.collector.images.errors.ImageBuildError": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.docker_engine.DockerUnavailable": ExitCode.NOT_STARTED,
    "fwbench.collector.store.owner.ResumeRefused": ExitCode.NOT_STARTED,
    "fwbench.collector.agents.security.SecurityError": ExitCode.NOT_STARTED,
    "fwbench.collector.store.tables.StorageUnusable": ExitCode.NOT_STARTED,
    "fwbench.collector.store.merge.MergeRefused": ExitCode.NOT_STARTED,
    "fwbench.collector.store.database.PersistenceError": ExitCode.FAILED,
}


def exit_code(error_type: type[BaseException]) -> ExitCode | None:
    """The code EXIT_CODES gives the type, or the nearest of its bases it names; None for an
    error no command expects."""
    for base in error_type.__mro__:
        code = EXIT_CODES.get(f"{base.__module__}.{base.__qualname__}")
        if code is not None:
            return code
    return None


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
    code = exit_code(type(error))
    fail(f"{error}{suffix}", ExitCode.FAILED if code is None else code)


@contextlib.contextmanager
def known_errors() -> Iterator[None]:
    """An error EXIT_CODES names (a subclass too) ends the command with its code, as fail_with
    does; any other passes through, as if never caught."""
    try:
        yield
    except Exception as error:
        if exit_code(type(error)) is None:
            raise
        fail_with(error)


P = ParamSpec("P")
R = TypeVar("R")


def reads_store(command: Callable[P, R]) -> Callable[P, R]:
    """A command that reads the store (its `store` option): a store that cannot be read
    (missing: a mistyped path never reads as a store without runs; damaged, not a store) ends
    it with one line that says so, naming the file and the reason, exit 2; never a traceback.
    Nothing is made where the store is missing (ResultStore(create=False))."""

    @functools.wraps(command)
    def reading(*args: P.args, **kwargs: P.kwargs) -> R:
        from fwbench.collector.store import StorageUnusable, default_store_path

        try:
            return command(*args, **kwargs)
        except StorageUnusable as error:
            fail_with(error)
        except sqlite3.Error as error:
            path = kwargs.get("store") or default_store_path()
            fail(f"cannot read the results store {path}: SQLite says: {error}")

    return reading


def load_manifests(extra: list[Path] | None) -> dict[str, AgentManifest]:
    from fwbench.collector.agents.manifest import ManifestError, discover_manifests, manifest_dirs

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
    from fwbench.collector.agents.scratch import mark_logs, move_logs, scratch_folder
    from fwbench.collector.run.defaults import DEFAULT_OUT

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
