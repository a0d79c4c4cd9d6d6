"""`collector`: the command users run. Exit codes: 0 all cells ok (or unsupported), 1 some
cells failed or results could not be saved, 2 bad input or agents that cannot be started,
130 interrupted."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import tempfile
from pathlib import Path
from typing import Annotated, NoReturn

import pandas as pd
import typer
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fwbench.collector.analysis_cli import compare, report
from fwbench.collector.client import AgentUnavailable, IncompatibleAgent
from fwbench.collector.display import summary_table
from fwbench.collector.envs import EnvironmentBuildError, environment_for
from fwbench.collector.images import DockerUnavailable, ImageBuildError
from fwbench.collector.images_cli import images_app
from fwbench.collector.instances import expand_instances
from fwbench.collector.launch import attach, parse_attached, start_local
from fwbench.collector.manifest import (
    AgentManifest,
    ManifestError,
    discover_manifests,
    manifest_dirs,
)
from fwbench.collector.plan import LoopSettings, SelectionError, build_selection, split_list
from fwbench.collector.schema import schema_markdown
from fwbench.collector.session import RunOptions, execute_run, resolve_agents
from fwbench.collector.store import PersistenceError, ResultStore, default_store_path
from fwbench.collector.telemetry import DEFAULT_INTERVAL_SECONDS
from fwbench.spec import load_catalogue

EXPORT_FORMATS = (".csv", ".parquet", ".jsonl", ".md")


def export_table(frame: pd.DataFrame, path: Path) -> None:
    """Writes the table in the format its suffix names (one of EXPORT_FORMATS)."""
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        # pandas 3.1's to_json drops nanoseconds even with date_unit="ns": format them here.
        stamps = frame.select_dtypes("datetimetz").columns
        text = frame.astype({c: object for c in stamps})
        for column in stamps:
            text[column] = frame[column].map(lambda t: None if pd.isna(t) else t.isoformat())
        text.to_json(path, orient="records", lines=True)
    else:
        path.write_text(str(frame.to_markdown(index=False)) + "\n")


app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__)
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True)

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


def fail(message: str, code: int = 2) -> NoReturn:
    errors.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _manifests(extra: list[Path] | None) -> dict[str, AgentManifest]:
    try:
        return discover_manifests(manifest_dirs(extra))
    except ManifestError as error:
        fail(str(error))


def _raise_interrupt(*_: object) -> None:
    raise KeyboardInterrupt


@app.command()
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
        float, typer.Option(help="Seconds before one cell is abandoned.")
    ] = 1800.0,
    start_timeout: Annotated[
        float, typer.Option(help="Seconds for an agent to become healthy.")
    ] = 180.0,
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
        str,
        typer.Option(
            help="How agents given by name start: local (a virtual environment each) or docker "
            "(a container each, from its image, built when missing or stale)."
        ),
    ] = "local",
    cpuset: Annotated[
        str, typer.Option(help="docker: CPUs each container is pinned to, e.g. 0-1 or 1.")
    ] = "",
    manifests: ManifestDirs = None,
    store: StorePath = None,
) -> None:
    """Run workloads on agents and store one normalized results table."""
    if launcher not in ("local", "docker"):
        fail(f"unknown launcher {launcher!r}; valid: local, docker")
    if cpuset and launcher != "docker":
        fail("--cpuset needs --launcher docker")
    catalogue = load_catalogue()
    declared = _manifests(manifests)
    agent_specs = expand_instances(split_list(agents), split_list(aa))
    try:
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
    except SelectionError as error:
        fail(str(error))
    options = RunOptions(
        agent_specs,
        out,
        store or default_store_path(),
        cell_timeout or None,
        start_timeout,
        shlex.join(["collector", *sys.argv[1:]]),
        scrape_interval_seconds=scrape_interval if scrape_interval > 0 else None,
        launcher=launcher,
        cpuset=cpuset,
    )
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        summary = execute_run(options, selection, catalogue, declared, console)
    except (
        SelectionError,
        AgentUnavailable,
        IncompatibleAgent,
        EnvironmentBuildError,
        ImageBuildError,
        DockerUnavailable,
    ) as error:
        fail(str(error))
    except PersistenceError as error:
        fail(f"{error}; results measured before this are kept in the store and folder", 1)
    except KeyboardInterrupt:
        fail("interrupted before measuring began; agents stopped, nothing written", 130)
    results = ResultStore(options.store_path).results(summary.run_id)
    console.print(summary_table(results, f"run {summary.run_id}"))
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.statuses.items()))
    console.print(f"results: {summary.out_dir}/results.parquet ({counts})", highlight=False)
    if summary.interrupted:
        fail("interrupted; results measured so far are saved", 130)
    if summary.statuses.get("failed") or summary.statuses.get("cancelled"):
        raise typer.Exit(1)


@app.command("agents")
def list_agents(manifests: ManifestDirs = None) -> None:
    """List declared agents and whether their local environment is ready."""
    table = Table("agent", "plugin", "variant", "environment", "description")
    for name, manifest in _manifests(manifests).items():
        env = environment_for(manifest)
        table.add_row(
            name,
            manifest.plugin,
            manifest.variant,
            f"{env.state()} ({env.path})",
            manifest.description,
        )
    console.print(table)


@app.command()
def env(
    agent: Annotated[str, typer.Argument(help="Declared agent name.")],
    manifests: ManifestDirs = None,
) -> None:
    """Create or refresh an agent's local environment and print its Python interpreter."""
    declared = _manifests(manifests)
    if agent not in declared:
        fail(f"unknown agent {agent!r}; declared agents: {', '.join(declared)}")
    environment = environment_for(declared[agent])
    try:
        environment.ensure(lambda line: errors.print(line))
    except EnvironmentBuildError as error:
        fail(str(error), 1)
    print(environment.python)


@app.command()
def describe(
    agent: Annotated[str, typer.Argument(help="Declared agent name or NAME@HOST:PORT.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw Describe reply.")] = False,
    manifests: ManifestDirs = None,
) -> None:
    """Start (or reach) an agent and print what it reports about itself."""
    declared = _manifests(manifests)
    try:
        resolve_agents([agent], declared)
        attached = parse_attached(agent)
        handle = (
            attach(*attached)
            if attached
            else start_local(
                declared[agent],
                Path(tempfile.mkdtemp(prefix="fwbench-logs-")),
                report=lambda line: errors.print(line),
            )
        )
    except (SelectionError, AgentUnavailable, EnvironmentBuildError) as error:
        fail(str(error))
    try:
        reply = MessageToDict(handle.client.describe(), preserving_proto_field_name=True)
    except (AgentUnavailable, IncompatibleAgent) as error:
        fail(str(error))
    finally:
        handle.stop()
    if as_json:
        print(json.dumps(reply, indent=2))
        return
    workloads = reply.pop("workloads", [])
    console.print_json(json.dumps(reply))
    console.print("workloads: " + ", ".join(w["name"] for w in workloads))


@app.command()
def results(
    run_id: Annotated[str | None, typer.Argument(help="Run to show; omit to list runs.")] = None,
    export: Annotated[
        Path | None,
        typer.Option(help="Write the run's table to this file: .csv, .parquet, .jsonl or .md."),
    ] = None,
    samples: Annotated[
        bool,
        typer.Option(
            "--samples", help="Export every raw step time (cell, iteration, seconds) instead."
        ),
    ] = False,
    store: StorePath = None,
) -> None:
    """List past runs, show one, or export one."""
    db = ResultStore(store or default_store_path())
    if run_id is None:
        runs = db.runs()
        table = Table("run", "started", "status", "cells", "folder")
        for row in runs.to_dict("records"):
            table.add_row(
                row["run_id"],
                row["started_at"][:19],
                row["status"],
                str(row["cells"]),
                row["out_dir"],
            )
        console.print(table)
        return
    if db.run_metadata(run_id) is None:
        fail(f"no run {run_id!r} in {db.path}; `collector results` lists the runs")
    if samples and export is None:
        fail("--samples exports the raw step times; give --export FILE")
    frame = db.samples(run_id) if samples else db.results(run_id)
    if export is None:
        console.print(summary_table(frame, f"run {run_id}"))
        return
    if export.suffix not in EXPORT_FORMATS:
        fail(f"unknown export format {export.suffix!r}; valid: {', '.join(EXPORT_FORMATS)}")
    export_table(frame, export)
    console.print(f"wrote {len(frame)} rows to {export}")


app.command()(compare)
app.add_typer(images_app, name="images")
app.command()(report)


@app.command()
def schema() -> None:
    """Print the results table schema as Markdown (docs/results-schema.md)."""
    print(schema_markdown(), end="")
