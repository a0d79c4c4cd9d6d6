"""One Run call to an agent: its event stream relayed to the display, watched for liveness
(liveness.py), and its result checked (validate.py) before anyone sees it."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.context import RunContext
from fwbench.collector.run.liveness import (
    MEASURE_GAP_SECONDS,
    STAGE_NAMES,
    STALL_GAP_SECONDS,
    CellWatch,
    sends_heartbeats,
)
from fwbench.collector.run.plan import Cell, LoopSettings
from fwbench.collector.run.profiles import PROFILES, profile_request
from fwbench.collector.run.validate import ProtocolViolation, check_result
from fwbench.collector.run.work import AgentWork
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES


class AgentCrashed(RuntimeError):
    """The agent process died or stopped answering during a cell."""

    code = "UNAVAILABLE"

    def why(self) -> str:
        """The failed row's error."""
        return f"agent crashed during this cell: {self}"


class AgentHung(AgentCrashed):
    """The agent sent no heartbeat, or no progress, for the hang timeout (liveness.py)."""

    code = "HUNG"

    def why(self) -> str:
        return str(self)


AGENT_BUSY = "AGENT_BUSY"  # error_code of a cell not measured because another caller had it


class AgentBusy(RuntimeError):
    """The agent refused the cell (FAILED_PRECONDITION) because it is measuring a run that is
    none of this run's cells: another caller shares it. Not waited for (docs/reliability.md):
    the agent's cells fail at once, so this run never cuts into the other caller's sweep."""

    def __init__(self, agent: str, details: str) -> None:
        said = f" (the agent says: {details})" if details else ""
        super().__init__(f"agent busy: {agent} is measuring another caller's run{said}")


class AgentStalled(RuntimeError):
    """The agent went silent for a while during a cell that then finished: a sample may span
    the stall, so the cell cannot be trusted. Its result's samples go with the failed row."""

    def __init__(self, watch: CellWatch, result: agent_pb2.RunResult) -> None:
        self.samples = list(result.sample_nanoseconds)
        if watch.longest_measure_gap > MEASURE_GAP_SECONDS:
            gap, limit, what = watch.longest_measure_gap, MEASURE_GAP_SECONDS, "a sample"
        else:
            gap, limit, what = watch.longest_gap, STALL_GAP_SECONDS, "a time the row reports"
        kept = ""
        if self.samples:
            seconds = sorted(self.samples)
            kept = (
                f"; its {len(seconds)} samples are kept with this row (longest "
                f"{seconds[-1] / 1e9:.4g} s, median {seconds[len(seconds) // 2] / 1e9:.4g} s)"
            )
        super().__init__(
            f"the agent sent nothing for {gap:.1f} s during this cell (more than {limit:g} s: "
            f"it was stopped or frozen); {what} may span the stall{kept}"
        )


class CollectorFrozen(RuntimeError):
    """The collector itself was frozen during the cell (liveness.py): not the agent's fault,
    but the collector cannot vouch for what it did not watch."""

    code = "COLLECTOR_FROZEN"

    def __init__(self, seconds: float) -> None:
        super().__init__(
            f"the collector itself was stopped for {seconds:.1f} s during this cell (frozen: "
            "it read nothing meanwhile); the agent is not blamed and was not stopped"
        )


def loop_request(loop: LoopSettings) -> dict[str, object]:
    """RunRequest fields for the measurement loop (unset fields take the agent's defaults)."""
    fields: dict[str, object] = {
        "min_iterations": loop.min_iterations,
        "max_iterations": loop.max_iterations,
    }
    if loop.warmup_iterations is not None:
        fields["warmup_iterations"] = loop.warmup_iterations
    if loop.min_seconds is not None:
        fields["min_seconds"] = loop.min_seconds
    return fields


def run_request(
    cell: Cell, run_id: str, ctx: RunContext, describe: agent_pb2.DescribeResponse
) -> agent_pb2.RunRequest:
    model = ctx.model_of(cell)
    steps = ctx.selection.profile_steps
    return agent_pb2.RunRequest(
        profile=profile_request(steps, describe, ctx.run_folder and ctx.run_folder / PROFILES),
        model=model.model_file(cell.batch_size, cell.agent) if model else None,
        run_id=run_id,
        workload=cell.workload,
        phase=PHASE_VALUES[cell.phase],
        batch_size=cell.batch_size,
        dtype=DTYPE_VALUES[cell.dtype],
        params=dict(cell.params),
        threads=cell.threads,
        seed=ctx.selection.seed,
        mode=cell.mode,
        strategy=cell.strategy,
        **loop_request(ctx.selection.loop),  # type: ignore[arg-type]
    )


def stream_result(
    item: AgentWork,
    request: agent_pb2.RunRequest,
    ctx: RunContext,
    on_stage: Callable[[str], object] = lambda _: None,
) -> agent_pb2.RunResult:
    """The cell's checked RunResult (`on_stage` hears each progress event's stage); raises
    grpc.RpcError (the call failed), AgentHung (no heartbeat or no progress for the hang
    timeout), AgentStalled (a gap in a finished cell), CollectorFrozen (the collector's own
    gap) or ProtocolViolation (the agent answered, wrongly)."""
    handle = item.handle
    heartbeats = sends_heartbeats(item.describe)
    call = handle.client.run(request, ctx.cell_timeout_seconds)
    watch = CellWatch(call, ctx.hang_timeout_seconds if heartbeats else None)
    try:
        for event in watch.events():
            if event.HasField("result"):
                check_result(request, event.result, ctx.catalogue)
                watch.stop()
                if heartbeats and (
                    watch.longest_measure_gap > MEASURE_GAP_SECONDS
                    or watch.longest_gap > STALL_GAP_SECONDS
                ):
                    raise AgentStalled(watch, event.result)
                if heartbeats and watch.collector_frozen:
                    raise CollectorFrozen(watch.collector_frozen)
                return event.result
            stage = STAGE_NAMES.get(event.progress.stage, "?")
            on_stage(stage)
            ctx.display.cell_progress(handle.name, stage, event.progress.iterations_done)
    except grpc.RpcError:
        if watch.fired:
            raise AgentHung(f"agent {handle.name} {watch.fired}") from None
        raise
    finally:
        watch.stop()
    raise ProtocolViolation("result", "the Run stream ended without a RunResult")


def gone(handle: AgentHandle) -> bool:
    """True when the agent died or stopped answering; a dying process gets a moment to be
    reaped so that its exit status can be reported."""
    if handle.client.healthy():
        return False
    handle.settle(3.0)  # alive but not answering after this: as good as gone
    return True


def rpc_failure(
    handle: AgentHandle,
    request: agent_pb2.RunRequest,
    error: grpc.RpcError,
    cell_timeout_seconds: float | None,
) -> tuple[str, str, str]:
    """(error code, status, details) of a cell whose Run failed; raises AgentCrashed when the
    agent died or stopped answering."""
    code: grpc.StatusCode = error.code()
    details = error.details() or code.name
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        handle.client.cancel(request.run_id)
        details = f"timed out after {cell_timeout_seconds:g} s"
    elif code in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.CANCELLED,
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.INTERNAL,
    ) and gone(handle):
        raise AgentCrashed(handle.exit_reason())
    # UNIMPLEMENTED: a cell the agent cannot run by its framework's rules (agent.proto), which
    # it can tell only from the request (torch's BatchNorm at batch 1 on a 1x1 map): as a cell
    # Describe rules out, unsupported with the agent's reason, not a failure. gRPC's own
    # UNIMPLEMENTED (an agent with no Run method) is a failure: nothing could be measured.
    status = _RPC_STATUS.get(code, "failed")
    if details in _NO_SUCH_METHOD:
        status = "failed"
    return code.name, status, details


_RPC_STATUS = {grpc.StatusCode.CANCELLED: "cancelled", grpc.StatusCode.UNIMPLEMENTED: "unsupported"}
# What gRPC itself says for a method the server lacks, or a generated servicer's stub.
_NO_SUCH_METHOD = ("Method not found!", "Method not implemented!")
