"""What one caller of a busy agent may do to another's run (agent.proto, Run's
FAILED_PRECONDITION and Cancel): nothing without its id. The suite's second caller is a client
of its own (another x-fwbench-client id, another connection, as a second collector is): an
empty-id Cancel from it must not stop the long run, and a busy refusal must not tell it the
run's id (with the id, any caller can cancel the run). An agent that authenticates every
caller (a token or a client certificate) may let any of them do both: the two checks are
skipped when the suite brings either. And a bad request to a busy agent gets its own status
(INVALID_ARGUMENT, NOT_FOUND), not FAILED_PRECONDITION: requests are checked before the busy
check, so a client learns what is wrong with its request whoever else is measuring."""

from __future__ import annotations

import time

import grpc

from fwbench.collector.conformance.cells import cell_request, cheapest, default_cell
from fwbench.collector.conformance.errors import UNKNOWN_WORKLOAD
from fwbench.collector.conformance.longrun import STOP_SECONDS, cancel, forget_long_run, long_run
from fwbench.collector.conformance.suite import (
    Failed,
    Skipped,
    Target,
    expect_status,
    run_to_end,
    status_text,
)

_TRUSTED = (
    "the suite reaches the agent with a token or a client certificate: an agent that "
    "authenticates every caller may let any of them {}"
)


def busy_to_another_caller(target: Target) -> str:
    if target.authenticated_callers():
        raise Skipped(_TRUSTED.format("know the active run's id"))
    run = long_run(target)
    request = cell_request(target, default_cell(cheapest(target)))
    try:
        run_to_end(target, request, STOP_SECONDS, target.other_caller())
    except grpc.RpcError as error:
        if error.code() != grpc.StatusCode.FAILED_PRECONDITION:
            raise Failed(f"expected FAILED_PRECONDITION, got {status_text(error)}") from None
        details = error.details() or ""
    else:
        raise Failed("expected FAILED_PRECONDITION, the second caller's run succeeded")
    secret = run.request.run_id.removeprefix("conformance-")
    if secret in details:
        raise Failed(
            f"the busy refusal to another caller names the active run's id ({details!r}): "
            "agent.proto lets it name the run only to the caller that started it, since "
            "whoever has the id can Cancel the run"
        )
    if not run.running():
        raise Failed(f"the second caller's Run disturbed the first: {run.outcome}")
    return details[:120]


def bad_request_while_busy(target: Target) -> str:
    run = long_run(target)
    base = default_cell(cheapest(target))
    bad = (
        ("batch_size 0", grpc.StatusCode.INVALID_ARGUMENT, "batch_size", {"batch_size": 0}),
        (
            "an unknown workload",
            grpc.StatusCode.NOT_FOUND,
            "",
            {"workload": UNKNOWN_WORKLOAD, "params": {}},
        ),
    )
    for what, code, naming, fields in bad:
        request = cell_request(target, base, **fields)
        try:
            expect_status(target, request, code, naming, client=target.other_caller())
        except Failed as failure:
            raise Failed(
                f"{what} while another run is on: {failure}; agent.proto checks a request "
                "before the busy check, so a bad one gets its own status, not "
                "FAILED_PRECONDITION"
            ) from None
    if not run.running():
        raise Failed(f"the bad requests disturbed the running run: {run.outcome}")
    return "INVALID_ARGUMENT and NOT_FOUND while busy; the running run went on"


def cancel_from_another_caller(target: Target) -> str:
    if target.authenticated_callers():
        raise Skipped(_TRUSTED.format("cancel the active run without naming it"))
    run = long_run(target)
    reply = cancel(target.other_caller(), "")
    time.sleep(0.5)
    if reply.cancelled or not run.running():
        forget_long_run(target, run)
        raise Failed(
            f"a Cancel without run id from another caller (its own x-fwbench-client id and "
            f"connection) answered cancelled = {str(reply.cancelled).lower()}, and the run "
            f"{'ended: ' + run.outcome if run.done.is_set() else 'did not end'}: agent.proto "
            "scopes it to the caller that started the run"
        )
    return "cancelled = false; the running run went on"
