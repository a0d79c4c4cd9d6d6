"""`collector run`: measure workloads on agents into one normalized results table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fwbench.collector.agents.launcher_kinds import DEFAULT_PIDS_LIMIT, LauncherKind
from fwbench.collector.agents.specs import IMAGE_SPEC_HELP
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
)
from fwbench.collector.cli.decide import Baseline, Budget, Margin, UntilDecided
from fwbench.collector.cli.security import AgentTokenFile, TlsCa, TlsCert, TlsKey, security_settings
from fwbench.collector.cli.slurm import SlurmContainer
from fwbench.collector.cli.slurm_export import SlurmExport, check_export
from fwbench.collector.cli.telemetry import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_THRESHOLD_PERCENT,
    InterferenceThreshold,
    QuietHost,
    ScrapeInterval,
    check_interference,
)
from fwbench.collector.run.defaults import CELL_TIMEOUT_SECONDS, HANG_SECONDS
from fwbench.spec import HEARTBEAT_SECONDS


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
        str, typer.Option(help="Comma-separated workloads (with --model: none unless given).")
    ] = "gemm,conv2d,resnet18",
    model: Annotated[
        Path | None,
        typer.Option(
            help="Your model file: .onnx, .keras, a SavedModel folder, .pt2 (torch.export), .pt "
            "(TorchScript) or .jax (jax.export); measured on every agent that reads its format, "
            "each agent's outputs checked against the first's (docs/your-model.md).",
        ),
    ] = None,
    model_input: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            metavar="NAME=SHAPE",
            help="With --model: the full shape of an input whose dimensions the model leaves "
            "open besides the batch, e.g. input_ids=8x128 (repeatable).",
        ),
    ] = None,
    sample: Annotated[
        Path | None,
        typer.Option(
            "--inputs",
            metavar="FILE.npz",
            help="With --model: your own inputs, a NumPy .npz of arrays named after the "
            "model's inputs, each cell feeding their first rows (default --batch-sizes: all "
            "of them); without it, inputs are made from --seed.",
        ),
    ] = None,
    export: Annotated[
        bool,
        typer.Option(
            "--export",
            help="With --model: also run the agents that read another format, on a file made "
            "by the frameworks' own exporters (a .keras as a SavedModel and ONNX, a .pt2 as "
            "ONNX and TorchScript), checked against the source before anything is timed.",
        ),
    ] = False,
    phases: Annotated[
        str, typer.Option(help="train, infer or both (with --model: infer unless given).")
    ] = "train,infer",
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
    profile: Annotated[
        int,
        typer.Option(
            min=0,
            max=1000,
            metavar="STEPS",
            help="After each cell's timed loop, run STEPS more under the framework's own "
            "profiler: rows gain the time by operation class, with the profiler's trace in "
            "the run folder (docs/profiling.md); 0 = none.",
        ),
    ] = 0,
    out: Annotated[
        Path | None, typer.Option(help="Output folder (default fwbench-results/RUN_ID).")
    ] = None,
    cell_timeout: Annotated[
        float, typer.Option(min=0.0, help="Seconds before one cell is abandoned (0 = never).")
    ] = CELL_TIMEOUT_SECONDS,
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
    # What running takes is imported here, not with the options: `collector --help` is fast;
    # the run's machinery (cli/execution.py) only once the input holds.
    from fwbench.collector.cli.run_start import Asked, DecideFlags, LaunchFlags, Measure, start_run
    from fwbench.collector.run.options import Limits, Telemetry
    from fwbench.collector.run.plan import LoopSettings

    security = security_settings(agent_token_file, tls_ca, tls_cert, tls_key)
    if slurm_export:
        check_export(launcher, slurm or [], resume, slurm_container)
    if resume:
        from fwbench.collector.cli.execution import resume_run

        return resume_run(ctx, resume, manifests, store, security)
    check_interference(interference_threshold, quiet_host)

    def given(name: str) -> bool:
        return getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"

    if model is not None:  # the model alone, for inference, unless more is asked
        workloads = workloads if given("workloads") else ""
        phases = phases if given("phases") else "infer"
        batch_sizes = batch_sizes if given("batch_sizes") or sample is None else ""
    start_run(
        ctx,
        Asked(agents, aa, world_sizes, strategies, out, store, manifests, slurm_export),
        Measure(
            workloads,
            phases,
            batch_sizes,
            dtypes,
            threads,
            modes,
            param,
            seed,
            LoopSettings(warmup, iterations, min_seconds, max_iterations),
            repeat if given("repeat") else None,
            fresh_process,
            model,
            model_input or [],
            export,
            sample,
            profile,
        ),
        Limits(cell_timeout or None, start_timeout, hang_timeout or None),
        Telemetry(
            scrape_interval if scrape_interval > 0 else None, interference_threshold, quiet_host
        ),
        LaunchFlags(
            launcher,
            {
                "python": python,
                "cpuset": cpuset,
                "memory": memory,
                "pids_limit": pids_limit,
                "slurm": slurm,
                "slurm_container": slurm_container,
                "k8s": k8s,
            },
            agent_env or [],
        ),
        DecideFlags(until_decided, budget, baseline, margin),
        security,
    )
