"""`collector run --slurm-export SCRIPT`: the run, checked as if it were to start now, written
as a Slurm batch script instead, so that the collector itself runs inside the allocation (the
batch step of one node's job) and starts its agents there as local processes: nothing crosses
from the cluster to the caller's machine while it measures, and no port of a compute node need
be reachable. The job writes its run folder and a store of its own under one folder on the
filesystem the nodes share; `collector results --merge FOLDER` adds the run to any store
afterwards (store/merge.py). docs/cluster.md."""

from __future__ import annotations

import shlex
import sys
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from fwbench.collector.agents.launcher_kinds import LauncherKind
from fwbench.collector.cli.common import console, fail

SlurmExport = Annotated[
    Path | None,
    typer.Option(
        metavar="SCRIPT",
        help="Write the run as a Slurm batch script instead of running it: the collector runs "
        "inside one node's allocation (--exclusive unless --slurm cpus-per-task=N or "
        "exclusive is given; --slurm options become its #SBATCH lines) and starts the agents "
        "there; submit it with sbatch, then `collector results --merge FOLDER` adds the run "
        "to your store (FOLDER: --out, default fwbench-results/slurm-JOBID).",
    ),
]

# Options the job's collector gets otherwise: its own folder and store, local agents, and the
# export itself; and --slurm, which became the script's #SBATCH lines.
DEFAULT_FOLDER = "fwbench-results/slurm-$SLURM_JOB_ID"  # in the folder sbatch ran in
NOT_PASSED = frozenset({"slurm_export", "out", "store", "launcher", "slurm", "resume"})


def _arguments(param: Any, value: Any) -> list[str]:
    """The option and its value as a command line gives them."""
    if param.is_flag:
        if param.secondary_opts:
            return [param.opts[0] if value else param.secondary_opts[0]]
        return [param.opts[0]] if value else []
    values = value if param.multiple else [value]
    words = []
    for one in values:
        if isinstance(one, Path):
            one = one.resolve()  # the job starts in the folder it was submitted from
        elif isinstance(one, Enum):
            one = one.value
        words += [param.opts[0], str(one)]
    return words


def given_arguments(ctx: typer.Context) -> list[str]:
    """The options given to this `collector run` (not those left at their defaults), but the
    ones the job's collector gets otherwise (NOT_PASSED). (Typer carries its own click: its
    classes are told by their attributes.)"""
    words: list[str] = []
    for param in ctx.command.params:
        if param.param_type_name != "option" or not param.name or param.name in NOT_PASSED:
            continue
        source = getattr(ctx.get_parameter_source(param.name), "name", "")
        if source in ("COMMANDLINE", "ENVIRONMENT"):
            words += _arguments(param, ctx.params[param.name])
    return words


def check_export(
    launcher: LauncherKind, slurm_options: list[str], resume: str, container: str = ""
) -> None:
    """Refuses what an exported run cannot be: a resumed run, agents in containers or pods,
    options for one agent's jobs (the run is one job)."""
    from fwbench.collector.launchers.slurm_jobs import scoped

    if resume:
        raise typer.BadParameter("a run is resumed where it ran", param_hint="--slurm-export")
    if container:
        raise typer.BadParameter(
            "the job's collector starts its agents as local processes, not in images "
            "(--slurm-container)",
            param_hint="--slurm-export",
        )
    if launcher not in (LauncherKind.LOCAL, LauncherKind.SLURM):
        raise typer.BadParameter(
            f"the job's collector starts its agents as local processes on its node, not "
            f"with --launcher {launcher.value}",
            param_hint="--slurm-export",
        )
    for option in slurm_options:
        if scoped(option)[0]:
            raise typer.BadParameter(
                f"{option}: an exported run is one job, for every agent: give its options "
                "without AGENT:",
                param_hint="--slurm",
            )


def batch_script(ctx: typer.Context, slurm_options: tuple[str, ...], out: Path | None) -> str:
    """The job: #SBATCH lines, then the collector, with this run's options, into FOLDER."""
    from fwbench.collector.store.merge import STORE_NAME

    folder = shlex.quote(str(out.resolve())) if out else f'"$PWD/{DEFAULT_FOLDER}"'
    names = {option.partition("=")[0] for option in slurm_options}
    shape = ["nodes=1", "job-name=fwbench-collector"]
    if not names & {"cpus-per-task", "exclusive"}:
        shape.append("exclusive")  # the node alone: no neighbour's work in the timings
    log = f"{out.resolve()}.log" if out else "fwbench-collector-%j.log"
    directives = [f"#SBATCH --{option}" for option in (*shape, f"output={log}", *slurm_options)]
    collector = [sys.executable, "-m", "fwbench.collector.cli", "run"]
    arguments = shlex.join([*collector, *given_arguments(ctx)])
    written = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        "\n".join(
            [
                "#!/bin/sh",
                f"# Written by `collector run --slurm-export` on {written}. Submit: sbatch SCRIPT.",
                "# Afterwards, `collector results --merge FOLDER` adds the run to a store.",
                *directives,
                "set -eu",
                f"folder={folder}",
                f'exec {arguments} --out "$folder" --store "$folder/{STORE_NAME}"',
            ]
        )
        + "\n"
    )


def export_run(
    ctx: typer.Context, path: Path, slurm_options: tuple[str, ...], out: Path | None
) -> None:
    """Writes the job's script to `path` and says how to go on."""
    try:
        if out is not None:  # Slurm opens the job's log (FOLDER.log) before the job starts
            out.resolve().parent.mkdir(parents=True, exist_ok=True)
        path.write_text(batch_script(ctx, slurm_options, out))
        path.chmod(0o755)
    except OSError as error:
        fail(f"cannot write {path}: {error}")
    folder = out.resolve() if out else DEFAULT_FOLDER.replace("$SLURM_JOB_ID", "JOBID")
    console.print(
        f"wrote {path}: submit it with `sbatch {shlex.quote(str(path))}` (from the folder the "
        f"run's folder goes in); when it has ended, `collector results --merge {folder}` adds "
        "its run to your store"
    )
