"""What `collector run` does with its flags (cli/run.py declares them, in panels): the agents
and their worlds resolved, the selection built, each part of the run's options checked and
composed (run/options.py), then the run carried out (cli/execution.py) or, with
--slurm-export, written as a batch job."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer

from fwbench.collector.agents.agent_environment import agent_environment
from fwbench.collector.agents.docker_engine import DockerUnavailable
from fwbench.collector.agents.environments import EnvironmentBuildError
from fwbench.collector.agents.existing import EnvironmentUnsuitable, check_pythons
from fwbench.collector.agents.image_labels import with_image_agents
from fwbench.collector.agents.manifest import AgentManifest, ManifestError
from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import (
    AgentSpecError,
    expand_instances,
    resolve_agents,
    with_worlds,
)
from fwbench.collector.cli.common import errors, fail, fail_with, load_manifests
from fwbench.collector.cli.decide import decide_options, decided_loop
from fwbench.collector.cli.slurm import agent_names
from fwbench.collector.cli.slurm_export import export_run
from fwbench.collector.cli.worlds import (
    DEFAULT_WORLD_ITERATIONS,
    check_world_workloads,
    has_worlds,
    parse_world_sizes,
)
from fwbench.collector.launchers import (
    LauncherKind,
    LauncherOptions,
    LaunchOptionError,
    OptionContext,
    launcher_options,
)
from fwbench.collector.launchers.python_options import PythonOptions
from fwbench.collector.launchers.slurm_options import SlurmOptions
from fwbench.collector.run.model_file import ModelRefused, asked_model, with_model
from fwbench.collector.run.options import Decision, Launch, Limits, RunOptions, Telemetry
from fwbench.collector.run.plan import (
    LoopSettings,
    Selection,
    SelectionError,
    build_selection,
    split_list,
)
from fwbench.spec import Catalogue, load_catalogue

BAD_INPUT = (
    SelectionError,
    AgentSpecError,
    ManifestError,
    DockerUnavailable,
    EnvironmentUnsuitable,
    EnvironmentBuildError,
)


@dataclass(frozen=True)
class Asked:
    """Which agents, in which worlds, with results where: --agents, --aa, --world-sizes,
    --strategies, --out, --store, --manifests, --slurm-export."""

    agents: str
    aa: str = ""
    world_sizes: str = ""
    strategies: str = "default"
    out: Path | None = None
    store: Path | None = None
    manifests: list[Path] | None = None
    slurm_export: Path | None = None


@dataclass(frozen=True)
class Measure:
    """What each agent measures, as given (run/plan.py builds the Selection); `repeat` None
    when not given (--until-decided has its own default)."""

    workloads: str
    phases: str
    batch_sizes: str
    dtypes: str
    threads: str
    modes: str
    params: list[str] | None
    seed: int
    loop: LoopSettings
    repeat: int | None
    fresh_process: bool
    model: Path | None = None  # --model
    model_inputs: list[str] = field(default_factory=list)  # --input NAME=SHAPE
    export: bool = False  # --export
    sample: Path | None = None  # --inputs FILE.npz
    profile_steps: int = 0  # --profile STEPS


@dataclass(frozen=True)
class LaunchFlags:
    """--launcher, every launcher's own flags (parameter name -> value; each launcher takes
    its own, launchers/options.py) and --agent-env."""

    launcher: LauncherKind
    own: Mapping[str, Any]
    agent_env: list[str]


@dataclass(frozen=True)
class DecideFlags:
    """--until-decided, --budget, --baseline, --margin."""

    until_decided: bool
    budget: str
    baseline: str
    margin: float | None


def start_run(
    ctx: typer.Context,
    asked: Asked,
    measure: Measure,
    limits: Limits,
    telemetry: Telemetry,
    launch: LaunchFlags,
    decide: DecideFlags,
    security: ChannelSecurity | None,
) -> None:
    """Checks everything, then measures (or exports the run); exits 2 with one line for input
    that cannot hold, before any agent starts."""
    if not asked.agents:
        fail("give --agents NAME[,NAME...] (`collector agents` lists them), or --resume RUN_ID")
    if asked.out is not None and asked.out.exists() and not asked.out.is_dir():
        fail(f"--out {asked.out} is a file; give a folder (new, or holding no run)")
    if (measure.export or measure.sample) and not measure.model:
        fail("--export and --inputs are about --model's file: give --model FILE")
    try:
        model = (
            asked_model(measure.model, measure.model_inputs, measure.export, measure.sample)
            if measure.model
            else None
        )
    except ModelRefused as error:
        fail_with(error)
    catalogue = with_model(load_catalogue(), model)
    if model is not None:
        measure = dataclasses.replace(
            measure,
            workloads=",".join(filter(None, (model.workload, measure.workloads))),
            batch_sizes=measure.batch_sizes or str(model.sample_rows),  # --inputs: all its rows
        )
    declared = load_manifests(asked.manifests)
    own = _launcher_options(launch, asked, declared)
    try:
        names, aa_names, declared = with_image_agents(
            split_list(asked.agents),
            split_list(asked.aa),
            declared,
            launch.launcher == LauncherKind.DOCKER,
        )
        threads = measure.threads
        sizes = parse_world_sizes(
            asked.world_sizes, measure.loop.min_seconds, threads, asked.strategies
        )
        instances = with_worlds(expand_instances(names, aa_names), sizes)
        loop = measure.loop
        if worlds := has_worlds(sizes, instances, loop.min_seconds, threads):  # the same steps
            loop = LoopSettings(
                loop.warmup_iterations,
                loop.min_iterations,
                0.0,
                loop.min_iterations or DEFAULT_WORLD_ITERATIONS,
            )
        resolve_agents(instances, declared)
        environment = agent_environment(launch.agent_env, instances, declared)
        if isinstance(own, PythonOptions):
            check_pythons(own.pythons, instances, declared, errors.print)
        decided = decide_options(
            decide.until_decided,
            decide.budget,
            decide.baseline,
            decide.margin,
            instances,
            measure.fresh_process,
        )
        decision = Decision(**decided)
        repeat = 1 if measure.repeat is None else measure.repeat
        if decision.until_decided_seconds is not None:
            repeat, iterations, warmup, min_seconds = decided_loop(
                measure.repeat, loop.min_iterations, loop.warmup_iterations, loop.min_seconds
            )
            loop = LoopSettings(warmup, iterations, min_seconds, loop.max_iterations)
        selection = _selection(catalogue, measure, loop, repeat, asked.strategies)
        check_world_workloads(catalogue, selection.workloads, worlds)
    except BAD_INPUT as error:
        fail_with(error)
    if asked.slurm_export:
        assert isinstance(own, SlurmOptions)  # an exported run's are the Slurm launcher's
        return export_run(ctx, asked.slurm_export, own.slurm_options, asked.out)
    # The run's machinery (the store, statistics, the agents' clients) only once the input
    # holds: a refused command answers in a blink.
    from fwbench.collector.cli.execution import execute
    from fwbench.collector.store import default_store_path

    options = RunOptions(
        instances,
        asked.out,
        asked.store or default_store_path(),
        shlex.join(["collector", *sys.argv[1:]]),
        limits,
        telemetry,
        Launch(
            launch.launcher,
            own,
            tuple(str(path.resolve()) for path in asked.manifests or ()),
            tuple(dict.fromkeys(m.image.id for m in declared.values() if m.image)),
            environment,
        ),
        decision,
        security,
        model=model,
    )
    execute(options, selection, declared)


def _launcher_options(
    launch: LaunchFlags, asked: Asked, declared: dict[str, AgentManifest]
) -> LauncherOptions:
    """The launcher's own options; an exported run's are the Slurm launcher's (its job is
    Slurm's, whatever --launcher its collector then uses)."""
    kind = LauncherKind.SLURM if asked.slurm_export else launch.launcher
    try:
        return launcher_options(
            kind, launch.own, OptionContext(frozenset(agent_names(asked.agents)), declared)
        )
    except LaunchOptionError as error:
        fail(str(error))
    except BAD_INPUT as error:
        fail_with(error)


def _selection(
    catalogue: Catalogue, measure: Measure, loop: LoopSettings, repeat: int, strategies: str
) -> Selection:
    return build_selection(
        catalogue,
        workloads=measure.workloads,
        phases=measure.phases,
        batch_sizes=measure.batch_sizes,
        dtypes=measure.dtypes,
        threads=measure.threads,
        modes=measure.modes,
        params=measure.params,
        loop=loop,
        seed=measure.seed,
        repeat=repeat,
        fresh_process=measure.fresh_process,
        strategies=strategies,
        profile_steps=measure.profile_steps,
    )


__all__ = ["Asked", "DecideFlags", "LaunchFlags", "Measure", "start_run"]
