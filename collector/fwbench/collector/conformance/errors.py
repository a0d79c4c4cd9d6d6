"""Refusals: requests the protocol says an agent must refuse, each with the status agent.proto
names and, for INVALID_ARGUMENT, a message naming the field. Every request is the cheapest
declared cell with one thing wrong, so an agent that wrongly accepts it finishes quickly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.cells import cell_request, cheapest, default_cell, runnable
from fwbench.collector.conformance.suite import Check, Skipped, Target, expect_status
from fwbench.collector.run.validate import iteration_limit
from fwbench.spec.enums import PHASE_VALUES

UNKNOWN_WORKLOAD = "no-such-workload"
UNKNOWN_PARAM = "no_such_param"
UNKNOWN_MODE = "no-such-mode"
INVALID_DTYPE = 99  # outside the DType enum
MAX_THREADS = 1024
INVALID, UNIMPLEMENTED = grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNIMPLEMENTED


def _refused(code: grpc.StatusCode, naming: str = "", **fields: Any) -> Callable[[Target], str]:
    """A check: the cheapest cell with `fields` changed is refused with `code`."""

    def check(target: Target) -> str:
        request = cell_request(target, default_cell(cheapest(target)), **fields)
        return expect_status(target, request, code, naming)

    return check


def _undeclared_workload(target: Target) -> str:
    declared = {w.name for w in target.described().workloads}
    absent = [name for name in target.catalogue.workloads if name not in declared]
    if not absent:
        raise Skipped("the agent declares every catalogue workload")
    base = default_cell(cheapest(target))
    request = cell_request(target, base, workload=absent[0], params={})
    return expect_status(target, request, UNIMPLEMENTED)


def _over_max_batch(target: Target) -> str:
    support = cheapest(target)
    request = cell_request(target, default_cell(support), batch_size=support.max_batch_size + 1)
    return expect_status(target, request, INVALID, "batch_size")


def _param_out_of_range(target: Target) -> str:
    candidates = [w for w in runnable(target) if w.params]
    if not candidates:
        raise Skipped("no declared workload has shape parameters")
    support = candidates[0]
    limit = support.params[0]
    request = cell_request(target, default_cell(support))
    request.params[limit.name] = limit.max_value + max(limit.multiple_of, 1)
    return expect_status(target, request, INVALID, f"params.{limit.name}")


def _undeclared_phase(target: Target) -> str:
    for support in runnable(target):
        known = target.catalogue.workloads[support.name]
        missing = [p for p in known.phases if PHASE_VALUES[p] not in support.phases]
        if missing:
            cell = default_cell(support)
            request = cell_request(target, cell, phase=PHASE_VALUES[missing[0]])
            return expect_status(target, request, UNIMPLEMENTED)
    raise Skipped("every declared workload declares every phase")


def _undeclared_dtype(target: Target) -> str:
    support = cheapest(target)
    missing = [d for d in agent_pb2.DType.values() if d and d not in support.dtypes]
    if not missing:
        raise Skipped(f"{support.name} declares every dtype")
    request = cell_request(target, default_cell(support), dtype=missing[0])
    return expect_status(target, request, UNIMPLEMENTED)


def _max_below_min(target: Target) -> str:
    least = iteration_limit(target.catalogue, "min_iterations", 0)
    request = cell_request(
        target,
        default_cell(cheapest(target)),
        min_iterations=least + 1,
        max_iterations=least,
    )
    return expect_status(target, request, INVALID, "max_iterations")


def error_checks() -> list[Check]:
    return [
        (
            "refuse unknown workload: NOT_FOUND",
            _refused(grpc.StatusCode.NOT_FOUND, workload=UNKNOWN_WORKLOAD, params={}),
        ),
        ("refuse undeclared catalogue workload: UNIMPLEMENTED", _undeclared_workload),
        ("refuse batch_size 0: INVALID_ARGUMENT", _refused(INVALID, "batch_size", batch_size=0)),
        ("refuse batch_size over max: INVALID_ARGUMENT", _over_max_batch),
        ("refuse param out of range: INVALID_ARGUMENT", _param_out_of_range),
        (
            "refuse unknown param: INVALID_ARGUMENT",
            _refused(INVALID, UNKNOWN_PARAM, params={UNKNOWN_PARAM: 1}),
        ),
        (
            "refuse PHASE_UNSPECIFIED: INVALID_ARGUMENT",
            _refused(INVALID, "phase", phase=agent_pb2.PHASE_UNSPECIFIED),
        ),
        ("refuse undeclared phase: UNIMPLEMENTED", _undeclared_phase),
        (
            "refuse dtype outside the enum: INVALID_ARGUMENT",
            _refused(INVALID, "dtype", dtype=INVALID_DTYPE),
        ),
        ("refuse undeclared dtype: UNIMPLEMENTED", _undeclared_dtype),
        ("refuse unknown mode: UNIMPLEMENTED", _refused(UNIMPLEMENTED, mode=UNKNOWN_MODE)),
        (
            "refuse threads over 1024: INVALID_ARGUMENT",
            _refused(INVALID, "threads", threads=MAX_THREADS + 1),
        ),
        ("refuse warmup over limit: INVALID_ARGUMENT", _warmup_over),
        (
            "refuse negative min_seconds: INVALID_ARGUMENT",
            _refused(INVALID, "min_seconds", min_seconds=-1.0),
        ),
        ("refuse max_iterations < min_iterations: INVALID_ARGUMENT", _max_below_min),
    ]


def _warmup_over(target: Target) -> str:
    most = target.catalogue.run_limits["warmup_iterations"].max
    check = _refused(INVALID, "warmup_iterations", warmup_iterations=most + 1)
    return check(target)
