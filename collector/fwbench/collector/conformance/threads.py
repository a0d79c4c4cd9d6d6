"""Thread counts in a RunRequest (agent.proto, RunRequest.threads): the agent's own count asked
explicitly runs with it (and DTYPE_UNSPECIFIED with mode "" runs float32 in the default mode);
another count runs with that count, or, where threads are fixed at start-up, is refused with
UNIMPLEMENTED. The other count is one fewer than the agent's own (one more when its own is
1): an agent's own count is usually every core, and some frameworks never run more threads
than cores (OpenVINO takes 2 when asked for 3 on 2 cores, and says so)."""

from __future__ import annotations

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.cells import cell_request, cheapest, check_reply, default_cell
from fwbench.collector.conformance.suite import Check, Skipped, Target, expect_status, run_to_end


def _own_count(target: Target) -> str:
    support = cheapest(target)
    if agent_pb2.DTYPE_FLOAT32 not in support.dtypes:
        raise Skipped(f"{support.name} does not declare float32")
    own = target.described().threads.intra_op_threads
    request = cell_request(
        target, default_cell(support), threads=own, dtype=agent_pb2.DTYPE_UNSPECIFIED, mode=""
    )
    progress, result = run_to_end(target, request)
    check_reply(target, request, progress, result)
    return f"threads {own}, float32, mode {result.settings.mode!r}"


def _other_count(target: Target) -> str:
    threads = target.described().threads
    own = threads.intra_op_threads
    other = own - 1 if own > 1 else own + 1
    request = cell_request(target, default_cell(cheapest(target)), threads=other)
    if threads.fixed_at_startup:
        return "fixed at start-up: " + expect_status(target, request, grpc.StatusCode.UNIMPLEMENTED)
    progress, result = run_to_end(target, request)
    check_reply(target, request, progress, result)
    return f"ran with {result.settings.intra_op_threads} threads"


def thread_checks() -> list[Check]:
    return [
        ("threads = the agent's own, dtype and mode unspecified", _own_count),
        ("threads = another count", _other_count),
    ]
