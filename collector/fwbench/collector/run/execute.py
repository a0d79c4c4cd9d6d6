"""Runs the planned cells: one agent at a time (the others wait idle, so they never contend),
one cell at a time, each result persisted before the next cell starts."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

import grpc
import pandas as pd

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.launchers.world import WorldHandle
from fwbench.collector.run.call import (
    AGENT_BUSY,
    AgentBusy,
    AgentCrashed,
    AgentStalled,
    CollectorFrozen,
    rpc_failure,
    run_request,
    stream_result,
)
from fwbench.collector.run.combine import world_columns
from fwbench.collector.run.context import RunContext
from fwbench.collector.run.interference import (
    judge,
    quiet_before_cell,
)
from fwbench.collector.run.normalize import failure_row, identity_columns, result_row
from fwbench.collector.run.plan import Cell
from fwbench.collector.run.profiles import profile_columns
from fwbench.collector.run.schedule import stretches
from fwbench.collector.run.telemetry import Scraper
from fwbench.collector.run.validate import ERROR_CODE, ProtocolViolation
from fwbench.collector.run.work import AgentWork
from fwbench.collector.run.world_telemetry import WorldScraper

# How long a cell waits for the agent to stop this run's previous cell (one that timed out):
# the agent stops at its next iteration. A run of another caller is not waited for (AgentBusy).
BUSY_GRACE_SECONDS = 30.0
STOPPING = "waiting for the agent to stop this run's previous cell"
LEFT = (
    "; this run leaves the agent to that caller rather than wait an unknown time or cut into "
    "its sweep: this cell and the agent's remaining cells are not measured (run them again "
    "when the agent is free)"
)


def run_all(work: Sequence[AgentWork], ctx: RunContext) -> None:
    """Measures every cell of every agent, `ctx.selection.repeat` times, in the order of
    schedule.py, in a fresh process of each agent per repetition unless the selection says
    otherwise. KeyboardInterrupt propagates after the running cell is cancelled on its agent
    and recorded as cancelled."""
    # id(AgentWork) -> (error code, why) of its remaining cells when they cannot run
    crashed_agents: dict[int, tuple[str, str]] = {}
    fresh = (ctx.selection.fresh_process and ctx.selection.repeat > 1) or ctx.round > 0
    order = stretches(work, ctx.selection.repeat, fresh, ctx.round)
    last = {id(item): position for position, (item, _) in enumerate(order)}
    for position, (item, whole) in enumerate(order):
        # A process that will not measure again before a fresh one replaces it is stopped
        # after its stretch (AgentWork.rest): idle, it would hold memory while others measure.
        rests = fresh or last[id(item)] == position
        first_index = ctx.next_index
        ctx.next_index += len(whole)
        numbered = [(first_index + i, pair) for i, pair in enumerate(whole)]
        stretch = [(index, pair) for index, pair in numbered if index not in ctx.skip]
        if not stretch:
            if rests:
                item.rest()
            continue
        code, crashed = crashed_agents.get(id(item), ("UNAVAILABLE", ""))
        if fresh:
            first, repetition = stretch[0][1]
            repetition += ctx.round
            try:
                if item.ensure_fresh(repetition, first.threads):
                    crashed = ""  # a new process: an earlier crash no longer applies
            except Exception as error:  # noqa: BLE001 (a failed start fails the stretch)
                code, crashed = "UNAVAILABLE", f"starting a fresh {item.handle.name} for "
                crashed += f"repetition {repetition} failed: {error}"
        samples: list[int]
        telemetry: pd.DataFrame | None
        for index, (cell, repetition) in stretch:
            if not crashed and not cell.unsupported_reason:
                verb = "starting" if item.idle else "restarting"  # given back after Describe
                try:
                    reason = item.ensure_threads(cell.threads)
                except Exception as error:  # noqa: BLE001 (a failed restart fails the rest)
                    code = "UNAVAILABLE"
                    threads = f"{cell.threads} threads" if cell.threads else "its default threads"
                    crashed = f"{verb} {item.handle.name} with {threads} failed: {error}"
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
            identity["repetition"] = repetition + ctx.round
            unsent = ""  # this process cannot have the model's files
            if model := ctx.model_of(cell):
                identity.update(model.flops_columns(cell, ctx.catalogue.train_flops_factor))
                if not (crashed or cell.unsupported_reason):
                    unsent = model.send_files(item)
            ctx.display.cell_started(item.handle.name, cell)
            telemetry = None
            if crashed or unsent:
                code = code if crashed else "FAILED_PRECONDITION"
                row, samples = (
                    _failed(identity, ctx, "failed", code, f"not run: {crashed or unsent}"),
                    [],
                )
            else:
                try:
                    row, samples, telemetry = _scraped_cell(item, cell, identity, ctx)
                except AgentCrashed as error:  # a crash or a hang
                    code, crashed = "UNAVAILABLE", _recover(item, error)
                    row, samples = _failed(identity, ctx, "failed", error.code, error.why()), []
                except AgentBusy as error:  # another caller's run: leave the agent to it
                    code, crashed = AGENT_BUSY, str(error)
                    row, samples = _failed(identity, ctx, "failed", code, f"{error}{LEFT}"), []
                if row.get("error_code") == "DEADLINE_EXCEEDED" and item.restart is not None:
                    # stopping at its next iteration may take long, or never come (stuck)
                    code, crashed = "UNAVAILABLE", _recover(item, AgentCrashed(row["error"]))
            _finish(item.handle.name, row, samples, ctx, telemetry)
            if ctx.observe is not None:
                ctx.observe(cell, row, samples)
        crashed_agents[id(item)] = (code, crashed)
        if rests:
            item.rest()


def _recover(item: AgentWork, error: AgentCrashed) -> str:
    """After a crash or a hang: a fresh process of an agent the collector started, so the
    sweep goes on ("" then); else why the agent's remaining cells cannot run."""
    name = item.handle.name
    try:
        if item.replace_dead():
            return ""
    except Exception as failure:  # noqa: BLE001 (the remaining cells carry it)
        return f"agent {name} failed ({error}) and starting it again failed: {failure}"
    return f"agent {name} failed earlier: {error}"


def _finish(
    agent: str,
    row: dict[str, Any],
    samples: Sequence[int],
    ctx: RunContext,
    telemetry: pd.DataFrame | None = None,
) -> None:
    ctx.recorder.record(row, samples, telemetry)
    ctx.display.cell_finished(agent, row)


def _failed(
    identity: dict[str, Any], ctx: RunContext, status: str, code: str, message: str
) -> dict[str, Any]:
    return failure_row(identity, ctx.selection.seed, status, code, message)


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
    handle = item.handle
    if ctx.quiet_host_seconds > 0:
        note = lambda text: ctx.display.note(handle.name, text)  # noqa: E731
        stage = lambda text: ctx.display.cell_progress(handle.name, text, 0)  # noqa: E731
        quiet_before_cell(address, ctx.quiet_host_seconds, ctx.interference_threshold, note, stage)
    interval = ctx.scrape_interval_seconds
    scraper: Scraper | WorldScraper = Scraper(address, interval)
    if isinstance(handle, WorldHandle):  # every rank's, at the stages' edges only
        scraper = WorldScraper([r.metrics_address for r in handle.ranks])
    with scraper:
        row, samples = _run_cell(item, cell, identity, ctx, scraper.on_stage)
    if row["status"] == "ok":
        start, end = row["measure_started_at"].value / 1e9, row["measure_ended_at"].value / 1e9
        row.update(scraper.summary(start, end, row.get("device") or ""))
        row.update(judge(row, ctx.interference_threshold))
        if scraper.errors and not row["telemetry_error"]:
            row["telemetry_error"] = f"{scraper.errors} scrapes failed: {scraper.last_error}"
    return row, samples, scraper.series()


def _run_cell(
    item: AgentWork,
    cell: Cell,
    identity: dict[str, Any],
    ctx: RunContext,
    on_stage: Callable[[str], object] = lambda _: None,
) -> tuple[dict[str, Any], list[int]]:
    if cell.unsupported_reason:
        return _failed(identity, ctx, "unsupported", "UNIMPLEMENTED", cell.unsupported_reason), []

    # Random too: an agent cancels a run for whoever names its id (agent.proto, Cancel).
    def run_id() -> str:
        return f"{ctx.run_id}-{identity['cell']}-{secrets.token_hex(8)}"

    request, handle = run_request(cell, run_id(), ctx, item.describe), item.handle
    busy_until = time.monotonic() + BUSY_GRACE_SECONDS
    again = True  # measured again once after the collector's own freeze
    while True:
        try:
            result = stream_result(item, request, ctx, on_stage)
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
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                details = error.details() or ""
                if ctx.run_id not in details:  # the run it names is none of this run's cells
                    raise AgentBusy(handle.name, details) from None
                if time.monotonic() < busy_until:  # still stopping a cell that timed out
                    ctx.display.cell_progress(handle.name, STOPPING, 0)
                    time.sleep(1.0)
                    continue
            name, status, why = rpc_failure(handle, request, error, ctx.cell_timeout_seconds)
            return _failed(identity, ctx, status, name, why), []
        except ProtocolViolation as error:
            return _failed(identity, ctx, "failed", ERROR_CODE, str(error)), []
        except AgentStalled as error:  # its samples kept with the failed row, for inspection
            row = _failed(identity, ctx, "failed", "STALLED", str(error))
            return {**row, "n": len(error.samples)}, error.samples
        except CollectorFrozen as error:
            if again:
                ctx.display.note(handle.name, f"{error}: measuring the cell again")
                again, request = False, run_request(cell, run_id(), ctx, item.describe)
                continue
            why = f"{error}; frozen again while the cell was measured a second time"
            return _failed(identity, ctx, "failed", error.code, why), []
        row = result_row(identity, item.describe, ctx.selection.seed, result, ctx.catalogue)
        profiled = profile_columns(
            ctx.selection.profile_steps,
            item.describe,
            result,
            row.get("median_seconds"),
            ctx.run_folder,
        )
        row.update(profiled)
        if model := ctx.model_of(cell):
            row.update(model.columns(cell, result))
        if isinstance(handle, WorldHandle):  # every rank's own figures, too
            ranks: list[agent_pb2.RunResult] = handle.client.last_results  # type: ignore[attr-defined]
            devices = max(item.describe.world.local_devices, 1)
            row.update(world_columns(ranks, handle.cpus, handle.placement, devices))
        return row, list(result.sample_nanoseconds)
