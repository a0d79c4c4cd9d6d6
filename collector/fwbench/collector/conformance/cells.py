"""Cells: declared workloads run at their smallest size (batch 1, 2 when training; every
shape parameter at its declared minimum; 1 warm-up and exactly 2 timed iterations; min_seconds
0), each reply checked as the collector checks it (run/validate.py), then for what the
protocol says beyond that: effective settings that match the request (dtype, mode, every shape
parameter, threads, a device), sane progress events. A cell refused UNIMPLEMENTED is skipped:
the protocol lets an agent refuse a combination it cannot run (the collector stores it
unsupported).

Which cells (--cells): `all` every declared workload x phase x dtype x mode; `each` (the
default) every workload x phase once in its default mode and dtype, and every dtype x mode
the cheapest workload declares; `one` the cheapest workload alone (its phases, dtypes and
modes). An accuracy workload trains at its largest batch (one step per epoch) for one epoch."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.choices import CellSet as CellSet
from fwbench.collector.conformance.suite import (
    Check,
    Failed,
    Skipped,
    Target,
    new_run_id,
    reraise,
    run_to_end,
    status_text,
)
from fwbench.collector.run.validate import ProtocolViolation, check_result
from fwbench.spec.catalogue import CatalogueError
from fwbench.spec.enums import DTYPE_NAMES, PHASE_NAMES

TIMED_ITERATIONS = 2
# Training batches hold 2 items: BatchNorm cannot train on one value per channel (a 1x1 map).
TRAIN_BATCH = 2


@dataclass(frozen=True)
class Cell:
    workload: str
    phase: int
    dtype: int
    mode: str

    def label(self) -> str:
        phase = PHASE_NAMES.get(self.phase, str(self.phase))  # type: ignore[call-overload]
        dtype = DTYPE_NAMES.get(self.dtype, str(self.dtype))  # type: ignore[call-overload]
        return f"{self.workload} {phase} {dtype} {self.mode}"


def smallest_params(support: agent_pb2.WorkloadSupport) -> dict[str, int]:
    """Every declared parameter at its minimum (rounded up to its multiple)."""
    params = {}
    for limit in support.params:
        step = max(limit.multiple_of, 1)
        params[limit.name] = -(-limit.min_value // step) * step
    return params


def is_accuracy(target: Target, workload: str) -> bool:
    known = target.catalogue.workloads.get(workload)
    return known is not None and known.kind == "accuracy"


def cell_request(target: Target, cell: Cell, **fields: object) -> agent_pb2.RunRequest:
    """The smallest request for `cell`; `fields` override any RunRequest field."""
    support = target.support(cell.workload)
    batch = min(TRAIN_BATCH if cell.phase == agent_pb2.PHASE_TRAIN else 1, support.max_batch_size)
    if is_accuracy(target, cell.workload):
        batch = support.max_batch_size
    values: dict[str, object] = {
        "run_id": new_run_id(),
        "workload": cell.workload,
        "phase": cell.phase,
        "batch_size": batch,
        "dtype": cell.dtype,
        "params": smallest_params(support),
        "warmup_iterations": 1,
        "min_iterations": TIMED_ITERATIONS,
        "max_iterations": TIMED_ITERATIONS,
        "min_seconds": 0.0,
        "mode": cell.mode,
    }
    return agent_pb2.RunRequest(**(values | fields))  # type: ignore[arg-type]


def _first_dtype(support: agent_pb2.WorkloadSupport) -> int:
    dtypes = list(support.dtypes)
    return agent_pb2.DTYPE_FLOAT32 if agent_pb2.DTYPE_FLOAT32 in dtypes else dtypes[0]


def default_cell(support: agent_pb2.WorkloadSupport) -> Cell:
    return Cell(support.name, support.phases[0], _first_dtype(support), support.modes[0])


def runnable(target: Target) -> list[agent_pb2.WorkloadSupport]:
    """Declared catalogue workloads with at least one phase, dtype and mode."""
    return [
        w
        for w in target.described().workloads
        if w.name in target.catalogue.workloads and w.phases and w.dtypes and w.modes
    ]


def cheapest(target: Target) -> agent_pb2.WorkloadSupport:
    """The runnable workload with the fewest FLOPs per step at its smallest size (accuracy
    workloads last: they train); raises Failed when there is none."""

    def cost(support: agent_pb2.WorkloadSupport) -> tuple[bool, float]:
        known = target.catalogue.workloads[support.name]
        try:
            flops = known.forward_flops_per_item(smallest_params(support))
        except CatalogueError:  # declared limits outside the catalogue's: Describe's checks
            flops = math.inf
        return known.kind == "accuracy", flops

    usable = runnable(target)
    if not usable:
        raise Failed("Describe declares no catalogue workload with phases, dtypes and modes")
    return min(usable, key=cost)


def select_cells(target: Target, cells: CellSet) -> list[Cell]:
    known = runnable(target)
    base = cheapest(target)
    chosen: list[Cell] = []
    if cells == CellSet.ALL:
        for w in known:
            product = itertools.product(w.phases, w.dtypes, w.modes)
            chosen += [Cell(w.name, p, d, m) for p, d, m in product]
        return chosen
    for w in [base] if cells == CellSet.ONE else known:
        first = default_cell(w)
        chosen += [Cell(w.name, phase, first.dtype, first.mode) for phase in w.phases]
    first_phase = base.phases[0]
    chosen += [
        Cell(base.name, first_phase, d, m) for d, m in itertools.product(base.dtypes, base.modes)
    ]
    return list(dict.fromkeys(chosen))


def check_reply(
    target: Target,
    request: agent_pb2.RunRequest,
    progress: list[agent_pb2.Progress],
    result: agent_pb2.RunResult,
) -> None:
    """The collector's own validation, then settings and progress; raises Failed."""
    try:
        check_result(request, result, target.catalogue)
    except ProtocolViolation as violation:
        raise Failed(str(violation)) from None
    check_settings(target, request, result.settings)
    check_progress(request, progress)


def check_settings(
    target: Target, request: agent_pb2.RunRequest, settings: agent_pb2.EffectiveSettings
) -> None:
    support = target.support(request.workload)
    wanted_dtype = request.dtype or agent_pb2.DTYPE_FLOAT32
    if settings.dtype != wanted_dtype:
        raise Failed(
            f"settings.dtype is {DTYPE_NAMES.get(settings.dtype, settings.dtype)}, "
            f"the request asked for {DTYPE_NAMES[wanted_dtype]}"
        )
    wanted_mode = request.mode or support.modes[0]
    if settings.mode != wanted_mode:
        raise Failed(f"settings.mode is {settings.mode!r}, the request asked for {wanted_mode!r}")
    params = {p.name: p.default_value for p in support.params} | dict(request.params)
    if dict(settings.params) != params:
        raise Failed(
            f"settings.params are {dict(settings.params)}, the request's with "
            f"defaults filled in are {params}"
        )
    threads = request.threads or target.described().threads.intra_op_threads
    if settings.intra_op_threads != threads:
        raise Failed(
            f"settings.intra_op_threads is {settings.intra_op_threads}, expected "
            f"{threads} ({'asked' if request.threads else 'the agent own, threads 0'})"
        )
    if not settings.device:
        raise Failed("settings.device is empty")


def check_progress(request: agent_pb2.RunRequest, progress: list[agent_pb2.Progress]) -> None:
    if not progress:
        raise Failed("no Progress event before the RunResult")
    stage, elapsed = 0, 0.0
    for event in progress:
        if event.run_id != request.run_id:
            raise Failed(f"a Progress event carries run id {event.run_id!r}, not the request's")
        if event.stage not in agent_pb2.Stage.values() or event.stage == 0:
            raise Failed(f"a Progress event has stage {event.stage}")
        if event.stage < stage:
            raise Failed(
                f"progress went back from stage {agent_pb2.Stage.Name(stage)} to "
                f"{agent_pb2.Stage.Name(event.stage)}"
            )
        if event.elapsed_seconds < elapsed:
            raise Failed(
                f"progress elapsed_seconds went back ({elapsed} -> {event.elapsed_seconds})"
            )
        stage, elapsed = event.stage, event.elapsed_seconds


def cell_checks(target: Target, cells: CellSet) -> Iterator[Check]:
    """One check per cell, chosen once Describe has answered (this is a generator)."""
    try:
        chosen = select_cells(target, cells)
    except Exception as error:  # noqa: BLE001 (Failed, Skipped, or a reply that breaks it)
        failure: Exception = error
        yield "run cells", lambda _: reraise(failure)
        return
    for cell in chosen:
        yield f"run {cell.label()}", _cell_check(cell)


def _cell_check(cell: Cell) -> Callable[[Target], str]:
    return lambda target: _run_cell(target, cell)


def _run_cell(target: Target, cell: Cell) -> str:
    request = cell_request(target, cell)
    try:
        progress, result = run_to_end(target, request)
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.UNIMPLEMENTED:
            raise
        raise Skipped(
            f"refused as unsupported, which the protocol allows: {status_text(error)}"
        ) from None
    check_reply(target, request, progress, result)
    count = len(result.sample_nanoseconds)
    return f"{count} samples, {len(progress)} progress events"
