"""One Run call to an agent: its event stream relayed to the display, watched for liveness
(liveness.py), and its result checked (validate.py) before anyone sees it."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.launchers import AgentHandle
from fwbench.collector.run.liveness import STALL_GAP_SECONDS, StallWatch, sends_heartbeats
from fwbench.collector.run.validate import ProtocolViolation, check_result
from fwbench.collector.run.work import AgentWork
from fwbench.spec import HEARTBEAT_SECONDS

if TYPE_CHECKING:
    from fwbench.collector.run.execute import RunContext

STAGE_NAMES = {
    agent_pb2.STAGE_BUILD: "build",
    agent_pb2.STAGE_FIRST_ITERATION: "first iteration",
    agent_pb2.STAGE_WARMUP: "warm-up",
    agent_pb2.STAGE_MEASURE: "measure",
}


class AgentCrashed(RuntimeError):
    """The agent process died or stopped answering during a cell."""


class AgentHung(AgentCrashed):
    """The agent sent no heartbeat for the hang timeout (liveness.py)."""


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
    the stall, so the cell cannot be trusted."""

    def __init__(self, gap_seconds: float) -> None:
        super().__init__(
            f"the agent sent nothing for {gap_seconds:.1f} s during this cell (more than "
            f"{STALL_GAP_SECONDS:g} s: it was stopped or frozen); a sample may span the stall"
        )


def stream_result(
    item: AgentWork, request: agent_pb2.RunRequest, ctx: RunContext
) -> agent_pb2.RunResult:
    """The cell's checked RunResult; raises grpc.RpcError (the call failed), AgentHung (no
    heartbeat for the hang timeout), AgentStalled (a gap in a finished cell) or
    ProtocolViolation (the agent answered, wrongly)."""
    handle = item.handle
    heartbeats = sends_heartbeats(item.describe)
    call = handle.client.run(request, ctx.cell_timeout_seconds)
    watch = StallWatch(call, ctx.hang_timeout_seconds if heartbeats else None)
    try:
        for event in call:
            watch.event()
            if event.HasField("result"):
                check_result(request, event.result, ctx.catalogue)
                if heartbeats and watch.longest_gap > STALL_GAP_SECONDS:
                    raise AgentStalled(watch.longest_gap)
                return event.result
            stage = STAGE_NAMES.get(event.progress.stage, "?")
            ctx.display.cell_progress(handle.name, stage, event.progress.iterations_done)
    except grpc.RpcError:
        if watch.fired:
            raise AgentHung(
                f"agent {handle.name} sent nothing for {ctx.hang_timeout_seconds:g} s (it "
                f"sends a heartbeat every {HEARTBEAT_SECONDS:g} s while it runs): hung, "
                "stopped or frozen"
            ) from None
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
