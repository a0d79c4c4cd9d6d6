"""`collector run`: measure workloads on agents into one normalized results table."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated

import typer

from fwbench.collector.agents.agent_environment import agent_environment
from fwbench.collector.agents.docker_engine import DockerUnavailable
from fwbench.collector.agents.environments import EnvironmentBuildError
from fwbench.collector.agents.existing import EnvironmentUnsuitable, check_pythons, parse_pythons
from fwbench.collector.agents.image_labels import with_image_agents
from fwbench.collector.agents.manifest import ManifestError
from fwbench.collector.agents.specs import (
    IMAGE_SPEC_HELP,
    AgentSpecError,
    expand_instances,
    resolve_agents,
    with_worlds,
)
from fwbench.collector.cli.common import (
    AgentEnv,
    Cpuset,
    K8sOptions,
    LauncherOption,
    ManifestDirs,
    Memory,
    PidsLimit,
    Pythons,
    SlurmOptions,
    StorePath,
    check_launcher_options,
    errors,
    fail,
    fail_with,
    load_manifests,
)
from fwbench.collector.cli.decide import (
    Baseline,
    Budget,
    Margin,
    UntilDecided,
    decide_options,
    decided_loop,
)
from fwbench.collector.cli.execution import execute, resume_run
from fwbench.collector.cli.k8s import check_k8s_options
from fwbench.collector.cli.security import AgentTokenFile, TlsCa, TlsCert, TlsKey, security_settings
from fwbench.collector.cli.slurm import (
    SlurmContainer,
    agent_names,
    check_slurm_container,
    check_slurm_options,
)
from fwbench.collector.cli.slurm_export import SlurmExport, check_export, export_run
from fwbench.collector.cli.telemetry import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_THRESHOLD_PERCENT,
    InterferenceThreshold,
    QuietHost,
    ScrapeInterval,
    check_interference,
)
from fwbench.collector.cli.worlds import (
    DEFAULT_WORLD_ITERATIONS,
    check_world_workloads,
    has_worlds,
    parse_world_sizes,
)
from fwbench.collector.launchers import DEFAULT_PIDS_LIMIT, LauncherKind
from fwbench.collector.run.liveness import HANG_SECONDS
from fwbench.collector.run.options import RunOptions
from fwbench.collector.run.plan import LoopSettings, SelectionError, build_selection, split_list
from fwbench.collector.store import default_store_path
from fwbench.spec import HEARTBEAT_SECONDS, load_catalogue

BAD_INPUT = (SelectionError, AgentSpecError, ManifestError, DockerUnavailable,
             EnvironmentUnsuitable, EnvironmentBuildError)  # fmt: skip


def run(
    ctx: typer.Context,
    agents: Annotated[
        str,
        typer.Option(
            help="Comma-separated agent names, NAME@HOST:PORT (a world's ranks: NAME@HOST:PORT+"
            f"HOST:PORT...), or {IMAGE_SPEC_HELP}; a name given twice runs two instances (NAME, "
            "NAME#2: an A/A pair). Required unless --resume."
        ),
    ] = "",
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
            help="Workload shape parameter NAME=VALUE, e.g. m=1024 or image_size=64, or a sweep "
            "NAME=A,B,... (each value a cell of its own); repeatable, one option per parameter."
        ),
    ] = None,
    warmup: Annotated[
        int | None, typer.Option(help="Warm-up iterations (default 5; 1 with --until-decided).")
    ] = None,
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
            help=f"Seconds without a heartbeat (sent every {HEARTBEAT_SECONDS:g} s) or progress "
            "(each build, compilation, step must end within it) before an agent counts as hung: "
            "the cell fails, an agent the collector started is restarted; 0 = --cell-timeout only.",
        ),
    ] = HANG_SECONDS,
    scrape_interval: ScrapeInterval = DEFAULT_INTERVAL_SECONDS,
    interference_threshold: InterferenceThreshold = DEFAULT_THRESHOLD_PERCENT,
    quiet_host: QuietHost = 0.0,
    repeat: Annotated[
        int,
        typer.Option(
            help="Run each cell this many times, agents alternating, their order turning "
            "each time (A B, B A, ...) so drift and position spread evenly; rows carry "
            "`repetition`."
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
    world_sizes: Annotated[
        str,
        typer.Option(
            help="Distributed training: comma-separated world sizes, e.g. 1,2, or 1xD for one "
            "process of D devices (TensorFlow mirrored, JAX jax_sharded). Each agent runs "
            "as a world of each size (one process per rank, pinned to its own CPUs) with its "
            "framework's own engine (torch: DDP over gloo; allreduce: the backend's "
            "collective); every rank runs exactly --iterations steps. docs/distributed.md",
        ),
    ] = "",
    strategies: Annotated[
        str,
        typer.Option(
            help="With --world-sizes: distributed strategies, default (each agent's first), "
            "all, or names (ddp, pipeline, ...)."
        ),
    ] = "default",
    aa: Annotated[
        str,
        typer.Option(
            "--aa",
            help="Comma-separated agents to run twice (NAME and NAME#2) to measure the "
            "noise floor; `collector compare` uses it.",
        ),
    ] = "",
    launcher: LauncherOption = LauncherKind.LOCAL,
    python: Pythons = None,
    agent_env: AgentEnv = None,
    slurm: SlurmOptions = None,
    slurm_export: SlurmExport = None,
    slurm_container: SlurmContainer = "",
    k8s: K8sOptions = None,
    cpuset: Cpuset = "",
    memory: Memory = "",
    pids_limit: PidsLimit = DEFAULT_PIDS_LIMIT,
    until_decided: UntilDecided = False,
    budget: Budget = "",
    baseline: Baseline = "",
    margin: Margin = None,
    # Attached agents' token and TLS (cli/security.py, docs/security.md).
    agent_token_file: AgentTokenFile = None,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    manifests: ManifestDirs = None,
    store: StorePath = None,
    resume: Annotated[
        str,
        typer.Option(
            metavar="RUN_ID",
            help="Finish a run that was interrupted, killed or stopped by a write error: "
            "measure only its missing cells, with its own selection and settings, into the "
            "same run (`collector results` shows such runs as interrupted or incomplete).",
        ),
    ] = "",
) -> None:
    """Run workloads on agents and store one normalized results table."""
    if slurm_export:
        check_export(launcher, slurm or [], resume, slurm_container)
    if resume:
        security = security_settings(agent_token_file, tls_ca, tls_cert, tls_key)
        resume_run(ctx, resume, manifests, store, security)
        return
    if not agents:
        fail("give --agents NAME[,NAME...] (`collector agents` lists them), or --resume RUN_ID")
    if out is not None and out.exists() and not out.is_dir():
        fail(f"--out {out} is a file; give a folder (new, or holding no run)")
    check_launcher_options(launcher, cpuset, memory, pids_limit, python)
    check_interference(interference_threshold, quiet_host)
    slurm_launcher = LauncherKind.SLURM if slurm_export else launcher
    slurm_options = check_slurm_options(slurm or [], slurm_launcher, agent_names(agents))
    slurm_container = check_slurm_container(slurm_container, launcher, python)
    security = security_settings(agent_token_file, tls_ca, tls_cert, tls_key)
    catalogue = load_catalogue()
    declared = load_manifests(manifests)
    try:
        names, aa_names, declared = with_image_agents(
            split_list(agents), split_list(aa), declared, launcher == LauncherKind.DOCKER
        )
        sizes = parse_world_sizes(world_sizes, min_seconds, threads, strategies)
        agent_specs = with_worlds(expand_instances(names, aa_names), sizes)
        if worlds := has_worlds(sizes, agent_specs, min_seconds, threads):  # the same steps
            min_seconds, max_iterations = 0.0, iterations or DEFAULT_WORLD_ITERATIONS
        resolve_agents(agent_specs, declared)
        environment = agent_environment(agent_env or [], agent_specs, declared)
        pythons = parse_pythons(python or [], declared)
        check_pythons(pythons, agent_specs, declared, errors.print)
        decide = decide_options(until_decided, budget, baseline, margin, agent_specs, fresh_process)
        if decide:
            given = getattr(ctx.get_parameter_source("repeat"), "name", "") == "COMMANDLINE"
            repeat, iterations, warmup, min_seconds = decided_loop(
                repeat if given else None, iterations, warmup, min_seconds
            )
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
            strategies=strategies,
        )
        check_world_workloads(catalogue, selection.workloads, worlds)
    except BAD_INPUT as error:
        fail_with(error)
    if slurm_export:
        return export_run(ctx, slurm_export, slurm_options, out)
    options = RunOptions(
        agent_specs,
        out,
        store or default_store_path(),
        cell_timeout or None,
        start_timeout,
        shlex.join(["collector", *sys.argv[1:]]),
        scrape_interval_seconds=scrape_interval if scrape_interval > 0 else None,
        hang_timeout_seconds=hang_timeout or None,
        interference_threshold=interference_threshold,
        quiet_host_seconds=quiet_host,
        launcher=launcher,
        cpuset=cpuset,
        memory=memory,
        pids_limit=pids_limit,
        slurm_options=slurm_options,
        slurm_container=slurm_container,
        k8s_options=check_k8s_options(k8s or [], launcher),
        manifest_dirs=tuple(str(path.resolve()) for path in manifests or ()),
        pythons=pythons,
        agent_environment=environment,
        images=tuple(dict.fromkeys(m.image.id for m in declared.values() if m.image)),
        security=security,
        **decide,
    )
    execute(options, selection, declared)
