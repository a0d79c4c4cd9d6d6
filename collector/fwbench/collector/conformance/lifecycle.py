"""Runs that do not end on their own: the busy refusal (to the run's own caller, and to another
that must not learn the run's id), a bad request while busy (its own status first), Cancel
(from another caller without an id, of another id, then of the run), a deadline shorter than
the work, and the agent ready again after each. The long run is longrun.py's."""

from __future__ import annotations

import time

import grpc

from fwbench.collector.conformance.callers import (
    bad_request_while_busy,
    busy_to_another_caller,
    cancel_from_another_caller,
)
from fwbench.collector.conformance.cells import cell_request, cheapest, default_cell
from fwbench.collector.conformance.longrun import (
    STOP_SECONDS,
    cancel,
    forget_long_run,
    long_run,
    run_when_free,
    stop_long_run,
)
from fwbench.collector.conformance.suite import (
    Check,
    Failed,
    Target,
    expect_status,
    new_run_id,
    status_text,
)

DEADLINE_SECONDS = 2.0


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
    reply = cancel(target.client, new_run_id())
    if reply.cancelled:
        raise Failed("Cancel of a run id nobody started answered cancelled = true")
    time.sleep(0.5)
    if not run.running():
        raise Failed(f"Cancel of another run id stopped the running one: {run.outcome}")
    return "cancelled = false; the running run went on"


def _cancel(target: Target) -> str:
    run = long_run(target)
    start = time.monotonic()
    reply = cancel(target.client, run.request.run_id)
    if not reply.cancelled:
        raise Failed("Cancel of the running run's id answered cancelled = false")
    if not run.done.wait(STOP_SECONDS):
        raise Failed(f"the cancelled run's stream had not ended {STOP_SECONDS:.0f} s later")
    forget_long_run(target, run)
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
    try:
        run_when_free(target, cell_request(target, default_cell(cheapest(target))))
    except grpc.RpcError as error:
        raise Failed(f"the agent did not take a new run: {status_text(error)}") from None
    return f"a new run succeeded {time.monotonic() - start:.2f} s later"


def lifecycle_checks() -> list[Check]:
    return [
        ("second Run while busy: FAILED_PRECONDITION", _busy),
        ("busy refusal to another caller: no run id", busy_to_another_caller),
        ("bad request while busy: its own status, not FAILED_PRECONDITION", bad_request_while_busy),
        ("Cancel without run id from another caller: cancelled false", cancel_from_another_caller),
        ("Cancel of an unknown run id: cancelled false", _cancel_unknown),
        ("Cancel of the running run: CANCELLED", _cancel),
        ("ready after Cancel", ready_again),
        (f"deadline {DEADLINE_SECONDS:.0f} s: DEADLINE_EXCEEDED", _deadline),
        ("ready after the deadline", ready_again),
    ]
