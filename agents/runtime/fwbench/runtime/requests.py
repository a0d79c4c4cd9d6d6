"""Turns a RunRequest into a validated WorkloadSpec and LoopPlan, or a precise error."""

from __future__ import annotations

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import Capability, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.timing import LoopPlan
from fwbench.spec.catalogue import Catalogue, CatalogueError, ParamSpec
from fwbench.spec.enums import DTYPE_NAMES, PHASE_NAMES

MAX_THREADS = 1024


def workload_spec(
    request: agent_pb2.RunRequest,
    catalogue: Catalogue,
    capabilities: dict[str, Capability],
) -> WorkloadSpec:
    """Raises UnknownWorkload, CatalogueError (bad values) or UnsupportedWorkload."""
    workload = catalogue.get(request.workload)
    capability = capabilities.get(workload.name)
    if capability is None:
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
    return WorkloadSpec(
        workload=workload,
        phase=phase,
        batch_size=request.batch_size,
        dtype=dtype,
        params=workload.resolve_params(dict(request.params)),
        threads=request.threads,
        seed=request.seed,
        mode=mode,
    )


def loop_plan(request: agent_pb2.RunRequest, catalogue: Catalogue) -> LoopPlan:
    """Measurement settings with catalogue defaults; raises CatalogueError when out of range."""
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
    return LoopPlan(warmup, min_iterations, min_seconds, max_iterations)
