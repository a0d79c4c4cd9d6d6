"""Runs the planned cells: one agent at a time (the others wait idle, so they never contend),
one cell at a time, each result persisted before the next cell starts."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
import pandas as pd

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.launchers import AgentHandle
from fwbench.collector.run.normalize import failure_row, identity_columns, result_row
from fwbench.collector.run.plan import Cell, Selection, loop_request
from fwbench.collector.run.schedule import stretches
from fwbench.collector.run.telemetry import Scraper, summarize
from fwbench.collector.run.validate import ERROR_CODE, ProtocolViolation, check_result
from fwbench.collector.run.work import AgentWork
from fwbench.spec import Catalogue
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

BUSY_GRACE_SECONDS = 30.0
_STAGE_NAMES = {
    agent_pb2.STAGE_BUILD: "build",
    agent_pb2.STAGE_FIRST_ITERATION: "first iteration",
    agent_pb2.STAGE_WARMUP: "warm-up",
    agent_pb2.STAGE_MEASURE: "measure",
}


class Recorder(Protocol):
    def record(
        self, row: dict[str, Any], samples_ns: Sequence[int], telemetry: pd.DataFrame | None
    ) -> None:
        """Persists one row, its raw samples and raw telemetry series; raises
        PersistenceError when it cannot."""


class Display(Protocol):
    def cell_started(self, agent: str, cell: Cell) -> None: ...
    def cell_progress(self, agent: str, stage: str, iterations: int) -> None: ...
    def cell_finished(self, agent: str, row: dict[str, Any]) -> None: ...


class AgentCrashed(RuntimeError):
    """The agent process died or stopped answering during a cell."""


@dataclass
class RunContext:
    run_id: str
    catalogue: Catalogue
    selection: Selection
    recorder: Recorder
    display: Display
    cell_timeout_seconds: float | None
    # Seconds between /metrics scrapes during a cell; None = no scraping at all.
    scrape_interval_seconds: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    next_index: int = 0


def run_all(work: Sequence[AgentWork], ctx: RunContext) -> None:
    """Measures every cell of every agent, `ctx.selection.repeat` times, in the order of
    schedule.py, in a fresh process of each agent per repetition unless the selection says
    otherwise. KeyboardInterrupt propagates after the running cell is cancelled on its agent
    and recorded as cancelled."""
    crashed_agents: dict[int, str] = {}  # id(AgentWork) -> why its remaining cells fail
    fresh = ctx.selection.fresh_process and ctx.selection.repeat > 1
    for item, stretch in stretches(work, ctx.selection.repeat, fresh):
        crashed = crashed_agents.get(id(item), "")
        if fresh:
            first, repetition = stretch[0]
            try:
                if item.ensure_fresh(repetition, first.threads):
                    crashed = ""  # a new process: an earlier crash no longer applies
            except Exception as error:  # noqa: BLE001 (a failed start fails the stretch)
                crashed = f"starting a fresh {item.handle.name} for repetition {repetition}"
                crashed += f" failed: {error}"
        samples: list[int]
        telemetry: pd.DataFrame | None
        for cell, repetition in stretch:
            index = ctx.next_index
            ctx.next_index += 1
            if not crashed and not cell.unsupported_reason:
                try:
                    reason = item.ensure_threads(cell.threads)
                except Exception as error:  # noqa: BLE001 (a failed restart fails the rest)
                    crashed = f"restarting {item.handle.name} with {cell.threads} threads failed"
                    crashed += f": {error}"
                    reason = ""
                if reason:
                    cell = dataclasses.replace(cell, unsupported_reason=reason)
            identity = identity_columns(
                ctx.run_id,
                index,
                item.handle,
                item.describe,
                cell,
                ctx.catalogue,
            )
            identity["repetition"] = repetition
            ctx.display.cell_started(item.handle.name, cell)
            telemetry = None
            if crashed:
                row, samples = (
                    _failed(identity, ctx, "failed", "UNAVAILABLE", f"not run: {crashed}"),
                    [],
                )
            else:
                try:
                    row, samples, telemetry = _scraped_cell(item, cell, identity, ctx)
                except AgentCrashed as error:
                    crashed = f"agent {item.handle.name} crashed earlier: {error}"
                    row, samples = (
                        _failed(
                            identity,
                            ctx,
                            "failed",
                            "UNAVAILABLE",
                            f"agent crashed during this cell: {error}",
                        ),
                        [],
                    )
            _finish(item.handle.name, row, samples, ctx, telemetry)
        crashed_agents[id(item)] = crashed


def _finish(
    agent: str,
    row: dict[str, Any],
    samples: Sequence[int],
    ctx: RunContext,
    telemetry: pd.DataFrame | None = None,
) -> None:
    ctx.recorder.record(row, samples, telemetry)
    ctx.statuses[row["status"]] = ctx.statuses.get(row["status"], 0) + 1
    ctx.display.cell_finished(agent, row)


def _failed(
    identity: dict[str, Any], ctx: RunContext, status: str, code: str, message: str
) -> dict[str, Any]:
    return failure_row(identity, ctx.selection.seed, status, code, message)


def _request(cell: Cell, run_id: str, ctx: RunContext) -> agent_pb2.RunRequest:
    return agent_pb2.RunRequest(
        run_id=run_id,
        workload=cell.workload,
        phase=PHASE_VALUES[cell.phase],
        batch_size=cell.batch_size,
        dtype=DTYPE_VALUES[cell.dtype],
        params=dict(cell.params),
        threads=cell.threads,
        seed=ctx.selection.seed,
        mode=cell.mode,
        **loop_request(ctx.selection.loop),  # type: ignore[arg-type]
    )


def _scraped_cell(
    item: AgentWork, cell: Cell, identity: dict[str, Any], ctx: RunContext
) -> tuple[dict[str, Any], list[int], pd.DataFrame | None]:
    """Runs a cell while scraping the agent's /metrics (when enabled and the agent has an
    endpoint); an ok row gains the telemetry columns over its timed phase."""
    address = item.handle.metrics_address
    if ctx.scrape_interval_seconds is None or cell.unsupported_reason or not address:
        row, samples = _run_cell(item, cell, identity, ctx)
        if row["status"] == "ok":
            off = ctx.scrape_interval_seconds is None
            row["telemetry_error"] = (
                "scraping off (--scrape-interval 0)"
                if off
                else "the agent has no /metrics endpoint"
            )
        return row, samples, None
    with Scraper(address, ctx.scrape_interval_seconds) as scraper:
        row, samples = _run_cell(item, cell, identity, ctx)
    if row["status"] == "ok":
        row.update(
            summarize(
                scraper.scrapes,
                row["measure_started_at"].value / 1e9,
                row["measure_ended_at"].value / 1e9,
                row.get("device") or "",
            )
        )
        if scraper.errors and not row["telemetry_error"]:
            row["telemetry_error"] = f"{scraper.errors} scrapes failed: {scraper.last_error}"
    return row, samples, scraper.series()


def _run_cell(
    item: AgentWork, cell: Cell, identity: dict[str, Any], ctx: RunContext
) -> tuple[dict[str, Any], list[int]]:
    if cell.unsupported_reason:
        return _failed(identity, ctx, "unsupported", "UNIMPLEMENTED", cell.unsupported_reason), []
    request = _request(cell, f"{ctx.run_id}-{identity['cell']}", ctx)
    handle = item.handle
    busy_until = time.monotonic() + BUSY_GRACE_SECONDS
    while True:
        try:
            result = _stream(handle, request, ctx)
        except KeyboardInterrupt:
            handle.client.cancel(request.run_id)
            _finish(
                handle.name,
                _failed(identity, ctx, "cancelled", "CANCELLED", "interrupted by the user"),
                [],
                ctx,
            )
            raise
        except grpc.RpcError as error:
            code: grpc.StatusCode = error.code()
            if code == grpc.StatusCode.FAILED_PRECONDITION and time.monotonic() < busy_until:
                time.sleep(1.0)  # still finishing a timed-out cell: wait for it
                continue
            return _rpc_failure(handle, request, identity, error, ctx), []
        except ProtocolViolation as error:
            return _failed(identity, ctx, "failed", ERROR_CODE, str(error)), []
        row = result_row(identity, item.describe, ctx.selection.seed, result)
        return row, list(result.sample_nanoseconds)


def _stream(
    handle: AgentHandle, request: agent_pb2.RunRequest, ctx: RunContext
) -> agent_pb2.RunResult:
    """The cell's checked RunResult; raises grpc.RpcError (the call failed) or
    ProtocolViolation (the agent answered, wrongly)."""
    for event in handle.client.run(request, ctx.cell_timeout_seconds):
        if event.HasField("result"):
            check_result(request, event.result, ctx.catalogue)
            return event.result
        ctx.display.cell_progress(
            handle.name, _STAGE_NAMES.get(event.progress.stage, "?"), event.progress.iterations_done
        )
    raise ProtocolViolation("result", "the Run stream ended without a RunResult")


def _rpc_failure(
    handle: AgentHandle,
    request: agent_pb2.RunRequest,
    identity: dict[str, Any],
    error: grpc.RpcError,
    ctx: RunContext,
) -> dict[str, Any]:
    code: grpc.StatusCode = error.code()
    details = error.details() or code.name
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        handle.client.cancel(request.run_id)
        details = f"timed out after {ctx.cell_timeout_seconds:g} s"
    elif code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    ) and _gone(handle):
        raise AgentCrashed(handle.exit_reason())
    status = "cancelled" if code == grpc.StatusCode.CANCELLED else "failed"
    return _failed(identity, ctx, status, code.name, details)


def _gone(handle: AgentHandle) -> bool:
    """True when the agent died or stopped answering; a dying process gets a moment to be
    reaped so that its exit status can be reported."""
    if handle.client.healthy():
        return False
    handle.settle(3.0)  # alive but not answering after this: as good as gone
    return True
