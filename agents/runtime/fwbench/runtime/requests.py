"""Turns a RunRequest into a validated WorkloadSpec and LoopPlan, or a precise error."""

from __future__ import annotations

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import Capability, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.timing import PROGRESS_SECONDS, WORLD_PROGRESS_SECONDS, LoopPlan
from fwbench.runtime.world import World
from fwbench.spec.catalogue import Catalogue, CatalogueError, ParamSpec
from fwbench.spec.enums import DTYPE_NAMES, PHASE_NAMES
from fwbench.spec.op_classes import MAX_PROFILE_STEPS

MAX_THREADS = 1024


def workload_spec(
    request: agent_pb2.RunRequest,
    catalogue: Catalogue,
    capabilities: dict[str, Capability],
    world: World | None = None,
) -> WorkloadSpec:
    """Raises UnknownWorkload, CatalogueError (bad values) or UnsupportedWorkload."""
    workload = catalogue.get(request.workload)
    capability = capabilities.get(workload.name)
    if capability is None:
        if world is not None:
            raise UnsupportedWorkload(
                f"this agent does not distribute {workload.name} (it is rank {world.rank} of "
                f"a world of {world.size})"
            )
        if workload.kind == "collective":
            raise UnsupportedWorkload(
                f"{workload.name} is a collective: it needs an agent started as a rank of a "
                "world (WORLD_SIZE, RANK, MASTER_ADDR, MASTER_PORT; collector run --world-sizes)"
            )
        raise UnsupportedWorkload(f"this agent does not implement {workload.name}")
    if request.phase not in PHASE_NAMES:
        raise CatalogueError("phase must be PHASE_TRAIN or PHASE_INFER", "phase")
    phase = PHASE_NAMES[request.phase]
    if phase not in capability.phases:
        raise UnsupportedWorkload(f"{workload.name} does not support phase {phase} here")
    catalogue.check_batch_size(workload.name, request.batch_size)
    dtype = DTYPE_NAMES.get(request.dtype)
    if dtype is None:
        raise CatalogueError(f"unknown dtype value {request.dtype}", "dtype")
    if dtype not in capability.dtypes:
        raise UnsupportedWorkload(
            f"{workload.name} does not support dtype {dtype} here; supported: "
            + ", ".join(capability.dtypes)
        )
    mode = request.mode or capability.modes[0]
    if mode not in capability.modes:
        raise UnsupportedWorkload(
            f"mode {mode!r} not supported for {workload.name}; supported: "
            + ", ".join(capability.modes)
        )
    ParamSpec("threads", 0, 0, MAX_THREADS).check(request.threads)
    strategy = _strategy(request.strategy, capability, world, workload.name)
    return WorkloadSpec(
        strategy=strategy,
        workload=workload,
        phase=phase,
        batch_size=request.batch_size,
        dtype=dtype,
        params=workload.resolve_params(dict(request.params)),
        threads=request.threads,
        seed=request.seed,
        mode=mode,
    )


def _strategy(asked: str, capability: Capability, world: World | None, workload: str) -> str:
    if world is None:
        if asked:
            raise UnsupportedWorkload(
                f"strategy {asked!r} needs an agent started as a rank of a world; this one "
                "runs alone"
            )
        return ""
    strategy = asked or capability.strategies[0]
    if strategy not in capability.strategies:
        raise UnsupportedWorkload(
            f"strategy {strategy!r} not offered for {workload}; offered: "
            + ", ".join(capability.strategies)
        )
    return strategy


def loop_plan(
    request: agent_pb2.RunRequest, catalogue: Catalogue, world: World | None = None
) -> LoopPlan:
    """Measurement settings with catalogue defaults; raises CatalogueError when out of range.
    In a world of several ranks every rank must run the same number of steps: min_seconds 0
    and max_iterations equal to min_iterations (agent.proto, RunRequest.strategy)."""
    limits = catalogue.run_limits
    warmup = (
        request.warmup_iterations
        if request.HasField("warmup_iterations")
        else limits["warmup_iterations"].default
    )
    min_iterations = request.min_iterations or limits["min_iterations"].default
    max_iterations = request.max_iterations or limits["max_iterations"].default
    for name, value in (
        ("warmup_iterations", warmup),
        ("min_iterations", min_iterations),
        ("max_iterations", max_iterations),
    ):
        limits[name].check(value)
    min_seconds = (
        request.min_seconds if request.HasField("min_seconds") else catalogue.min_seconds_default
    )
    if not 0.0 <= min_seconds <= catalogue.min_seconds_max:
        raise CatalogueError(
            f"min_seconds={min_seconds} is out of range: allowed 0..{catalogue.min_seconds_max}",
            "min_seconds",
        )
    if max_iterations < min_iterations:
        raise CatalogueError(
            f"max_iterations={max_iterations} is below min_iterations={min_iterations}",
            "max_iterations",
        )
    if world is not None and world.size > 1:
        if min_seconds != 0.0:
            raise CatalogueError(
                f"min_seconds={min_seconds} in a world of {world.size} ranks: must be 0 (ranks "
                "that stop at different steps would wait for each other)",
                "min_seconds",
            )
        if max_iterations != min_iterations:
            raise CatalogueError(
                f"max_iterations={max_iterations} in a world of {world.size} ranks: must equal "
                f"min_iterations={min_iterations} (every rank runs the same steps)",
                "max_iterations",
            )
    several = world is not None and world.size > 1
    progress = WORLD_PROGRESS_SECONDS if several else PROGRESS_SECONDS
    profile = request.profile
    if profile.steps > MAX_PROFILE_STEPS:
        raise CatalogueError(
            f"profile.steps={profile.steps} is out of range: allowed 0..{MAX_PROFILE_STEPS}",
            "profile.steps",
        )
    return LoopPlan(
        warmup,
        min_iterations,
        min_seconds,
        max_iterations,
        progress,
        profile_steps=profile.steps,
        trace_dir=profile.trace_dir if profile.steps else "",
    )
