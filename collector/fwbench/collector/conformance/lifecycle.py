"""Runs that do not end on their own: the busy refusal, Cancel (of another id, then of the
run), a deadline shorter than the work, and the agent ready again after each. The long run is
the cheapest declared cell with min_seconds at the catalogue's maximum (an hour)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.cells import cell_request, cheapest, default_cell
from fwbench.collector.conformance.suite import (
    Check,
    Failed,
    Target,
    expect_status,
    new_run_id,
    run_to_end,
    status_text,
)

STOP_SECONDS = 30.0  # for a cancelled or timed-out run to end, and the agent to take another
DEADLINE_SECONDS = 2.0
_LONG = "long run"


class LongRun:
    """The cheapest cell asked to run for an hour, consumed on a thread."""

    def __init__(self, target: Target) -> None:
        limits = target.catalogue.run_limits
        self.request = cell_request(
            target,
            default_cell(cheapest(target)),
            min_iterations=1,
            max_iterations=limits["max_iterations"].max,
            min_seconds=target.catalogue.min_seconds_max,
        )
        self.call: Iterator[agent_pb2.RunResponse] = target.client.run(self.request, None)
        self.measuring = threading.Event()
        self.done = threading.Event()
        self.outcome = ""
        self.code: grpc.StatusCode | None = None
        threading.Thread(target=self._consume, daemon=True).start()

    def _consume(self) -> None:
        try:
            for event in self.call:
                if event.HasField("result"):
                    self.outcome = "it finished with a RunResult"
                elif event.progress.stage == agent_pb2.STAGE_MEASURE:
                    self.measuring.set()
            self.outcome = self.outcome or "its stream ended OK without a RunResult"
        except grpc.RpcError as error:
            self.code = error.code()
            self.outcome = f"it ended with {status_text(error)}"
        finally:
            self.done.set()
            self.measuring.set()

    def running(self) -> bool:
        return not self.done.is_set()

    def stop(self) -> None:
        cancel = getattr(self.call, "cancel", None)
        if cancel is not None:
            cancel()


def long_run(target: Target) -> LongRun:
    """The long run of the target, started now if none is under way; waits until it measures."""
    run = target.notes.get(_LONG)
    if not isinstance(run, LongRun) or not run.running():
        run = LongRun(target)
        target.notes[_LONG] = run
    if not run.measuring.wait(target.cell_timeout_seconds):
        raise Failed(
            f"the long run sent no STAGE_MEASURE progress in {target.cell_timeout_seconds:.0f} s"
        )
    if not run.running():
        raise Failed(
            f"the long run (min_seconds {run.request.min_seconds:.0f}) stopped: {run.outcome}"
        )
    return run


def stop_long_run(target: Target) -> None:
    run = target.notes.pop(_LONG, None)
    if isinstance(run, LongRun):
        run.stop()


def _busy(target: Target) -> str:
    run = long_run(target)
    request = cell_request(target, default_cell(cheapest(target)))
    details = expect_status(
        target, request, grpc.StatusCode.FAILED_PRECONDITION, timeout=STOP_SECONDS
    )
    if not run.running():
        raise Failed(f"the second Run disturbed the first: {run.outcome}")
    return details


def _cancel_unknown(target: Target) -> str:
    run = long_run(target)
    reply = target.client.cancel_reply(new_run_id())
    if reply.cancelled:
        raise Failed("Cancel of a run id nobody started answered cancelled = true")
    time.sleep(0.5)
    if not run.running():
        raise Failed(f"Cancel of another run id stopped the running one: {run.outcome}")
    return "cancelled = false; the running run went on"


def _cancel(target: Target) -> str:
    run = long_run(target)
    start = time.monotonic()
    reply = target.client.cancel_reply(run.request.run_id)
    if not reply.cancelled:
        raise Failed("Cancel of the running run's id answered cancelled = false")
    if not run.done.wait(STOP_SECONDS):
        raise Failed(f"the cancelled run's stream had not ended {STOP_SECONDS:.0f} s later")
    target.notes.pop(_LONG, None)
    if run.code != grpc.StatusCode.CANCELLED:
        raise Failed(f"expected the cancelled stream to end with CANCELLED; {run.outcome}")
    return f"CANCELLED after {time.monotonic() - start:.2f} s"


def _deadline(target: Target) -> str:
    limits = target.catalogue.run_limits
    request = cell_request(
        target,
        default_cell(cheapest(target)),
        min_iterations=1,
        max_iterations=limits["max_iterations"].max,
        min_seconds=target.catalogue.min_seconds_max,
    )
    return expect_status(
        target, request, grpc.StatusCode.DEADLINE_EXCEEDED, timeout=DEADLINE_SECONDS
    )


def ready_again(target: Target) -> str:
    """A cheap run succeeds within STOP_SECONDS (FAILED_PRECONDITION meanwhile is allowed)."""
    stop_long_run(target)
    start = time.monotonic()
    request = cell_request(target, default_cell(cheapest(target)))
    while True:
        request.run_id = new_run_id()
        try:
            run_to_end(target, request)
            return f"a new run succeeded {time.monotonic() - start:.2f} s later"
        except grpc.RpcError as error:
            busy = error.code() == grpc.StatusCode.FAILED_PRECONDITION
            if not busy or time.monotonic() - start > STOP_SECONDS:
                raise Failed(f"the agent did not take a new run: {status_text(error)}") from None
            time.sleep(0.1)


def lifecycle_checks() -> list[Check]:
    return [
        ("second Run while busy: FAILED_PRECONDITION", _busy),
        ("Cancel of an unknown run id: cancelled false", _cancel_unknown),
        ("Cancel of the running run: CANCELLED", _cancel),
        ("ready after Cancel", ready_again),
        (f"deadline {DEADLINE_SECONDS:.0f} s: DEADLINE_EXCEEDED", _deadline),
        ("ready after the deadline", ready_again),
    ]
