"""`collector run`: measure workloads on agents into one normalized results table."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from fwbench.collector.agents.launchers import DEFAULT_PIDS_LIMIT, LauncherKind
from fwbench.collector.agents.specs import AgentSpecError, expand_instances, resolve_agents
from fwbench.collector.cli.common import (
    KNOWN_ERRORS,
    ExitCode,
    ManifestDirs,
    StorePath,
    console,
    errors,
    fail,
    fail_with,
    load_manifests,
    take_interrupts_once,
)
from fwbench.collector.run.liveness import HANG_SECONDS
from fwbench.collector.run.plan import LoopSettings, SelectionError, build_selection, split_list
from fwbench.collector.run.progress import summary_table
from fwbench.collector.run.session import RunOptions, execute_run
from fwbench.collector.run.telemetry import DEFAULT_INTERVAL_SECONDS
from fwbench.collector.store import PersistenceError, ResultStore, default_store_path
from fwbench.spec import load_catalogue


def run(
    agents: Annotated[
        str,
        typer.Option(
            help="Comma-separated agent names or NAME@HOST:PORT; a name given twice runs two "
            "instances (NAME, NAME#2: an A/A pair)."
        ),
    ],
    workloads: Annotated[
        str, typer.Option(help="Comma-separated workloads.")
    ] = "gemm,conv2d,resnet18",
    phases: Annotated[str, typer.Option(help="train, infer or both.")] = "train,infer",
    batch_sizes: Annotated[str, typer.Option(help="Comma-separated batch sizes.")] = "1,8",
    dtypes: Annotated[str, typer.Option(help="Comma-separated dtypes.")] = "float32",
    threads: Annotated[str, typer.Option(help="Intra-op thread counts, 0 = agent default.")] = "0",
    modes: Annotated[
        str,
        typer.Option(
            help="Execution modes: default, all, or names (eager, compile, function, xla, jit)."
        ),
    ] = "default",
    param: Annotated[
        list[str] | None,
        typer.Option(
            help="Workload shape parameter NAME=VALUE, e.g. m=1024 or image_size=64 (repeatable)."
        ),
    ] = None,
    warmup: Annotated[int | None, typer.Option(help="Warm-up iterations (default 5).")] = None,
    iterations: Annotated[int, typer.Option(help="Minimum timed iterations (0 = 10).")] = 0,
    min_seconds: Annotated[
        float | None, typer.Option(help="Minimum timed seconds (default 1).")
    ] = None,
    max_iterations: Annotated[int, typer.Option(help="Cap on timed iterations (0 = 100000).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of synthetic inputs and weights.")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default fwbench-results/RUN_ID).")
    ] = None,
    cell_timeout: Annotated[
        float, typer.Option(min=0.0, help="Seconds before one cell is abandoned (0 = never).")
    ] = 1800.0,
    start_timeout: Annotated[
        float, typer.Option(min=1.0, help="Seconds for an agent to become healthy.")
    ] = 180.0,
    hang_timeout: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds without a heartbeat (agents send one every 2 s) before an agent "
            "counts as hung: the cell fails and an agent the collector started is restarted; "
            "0 = only --cell-timeout.",
        ),
    ] = HANG_SECONDS,
    scrape_interval: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="Seconds between scrapes of each agent's /metrics during a cell, 0 = no "
            "telemetry.",
        ),
    ] = DEFAULT_INTERVAL_SECONDS,
    repeat: Annotated[
        int,
        typer.Option(
            help="Run each cell this many times, agents alternating (A B A B) so drift "
            "spreads evenly; rows carry `repetition`."
        ),
    ] = 1,
    fresh_process: Annotated[
        bool,
        typer.Option(
            "--fresh-process/--same-process",
            help="With --repeat: a fresh process of each agent for every repetition (the "
            "default), so what lasts a process's life (allocator state, thread placement) "
            "counts as noise, not as a difference; --same-process keeps one per agent.",
        ),
    ] = True,
    aa: Annotated[
        str,
        typer.Option(
            "--aa",
            help="Comma-separated agents to run twice (NAME and NAME#2) to measure the "
            "noise floor; `collector compare` uses it.",
        ),
    ] = "",
    launcher: Annotated[
        LauncherKind,
        typer.Option(
            help="How agents given by name start: local (a virtual environment each) or docker "
            "(a container each, from its image, built when missing or stale)."
        ),
    ] = LauncherKind.LOCAL,
    cpuset: Annotated[
        str, typer.Option(help="docker: CPUs each container is pinned to, e.g. 0-1 or 1.")
    ] = "",
    memory: Annotated[
        str,
        typer.Option(
            help="docker: each container's memory limit, e.g. 8g (default: 90% of this host's)."
        ),
    ] = "",
    pids_limit: Annotated[
        int, typer.Option(min=64, help="docker: each container's process and thread limit.")
    ] = DEFAULT_PIDS_LIMIT,
    manifests: ManifestDirs = None,
    store: StorePath = None,
) -> None:
    """Run workloads on agents and store one normalized results table."""
    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; give a folder (new, or holding no run)")
    if (memory or pids_limit != DEFAULT_PIDS_LIMIT) and launcher != LauncherKind.DOCKER:
        fail("--memory and --pids-limit limit containers: they need --launcher docker")
    if cpuset and launcher != LauncherKind.DOCKER:
        fail("--cpuset needs --launcher docker")
    catalogue = load_catalogue()
    declared = load_manifests(manifests)
    try:
        agent_specs = expand_instances(split_list(agents), split_list(aa))
        resolve_agents(agent_specs, declared)
        selection = build_selection(
            catalogue,
            workloads=workloads,
            phases=phases,
            batch_sizes=batch_sizes,
            dtypes=dtypes,
            threads=threads,
            modes=modes,
            params=param,
            loop=LoopSettings(warmup, iterations, min_seconds, max_iterations),
            seed=seed,
            repeat=repeat,
            fresh_process=fresh_process,
        )
    except (SelectionError, AgentSpecError) as error:
        fail_with(error)
    options = RunOptions(
        agent_specs,
        out,
        store or default_store_path(),
        cell_timeout or None,
        start_timeout,
        shlex.join(["collector", *sys.argv[1:]]),
        scrape_interval_seconds=scrape_interval if scrape_interval > 0 else None,
        hang_timeout_seconds=hang_timeout or None,
        launcher=launcher,
        cpuset=cpuset,
        memory=memory,
        pids_limit=pids_limit,
    )
    take_interrupts_once()
    try:
        summary = execute_run(options, selection, catalogue, declared, errors)
    except PersistenceError as error:
        fail_with(error, "; results measured before this are kept in the store and folder")
    except KNOWN_ERRORS as error:
        fail_with(error)
    except KeyboardInterrupt:
        fail(
            "interrupted before measuring began; agents stopped, nothing written",
            ExitCode.INTERRUPTED,
        )
    results = ResultStore(options.store_path).results(summary.run_id)
    console.print(summary_table(results, f"run {summary.run_id}"))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.statuses.items()))
    console.print(f"results: {summary.out_dir}/results.parquet ({counts})", highlight=False)
    if summary.interrupted:
        fail("interrupted; results measured so far are saved", ExitCode.INTERRUPTED)
    if summary.status != "ok":
        fail(f"run {summary.run_id} is {summary.status}", ExitCode.FAILED)
