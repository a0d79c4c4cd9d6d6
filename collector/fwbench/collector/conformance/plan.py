"""The suite in its order: Describe first (every other check builds on it), then the services
beside AgentService, refusals, cells, thread counts, the heartbeat through a run past the
collector's stall limit and through one step past it, runs that are stopped (and other
callers' part in them), and /metrics last (after runs, so the workload series exist). Groups
can be picked (--checks); Describe's call runs whatever is picked."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from fwbench.collector.conformance.cells import cell_checks
from fwbench.collector.conformance.choices import GROUPS as GROUPS
from fwbench.collector.conformance.choices import CellSet
from fwbench.collector.conformance.describe import describe_checks
from fwbench.collector.conformance.errors import error_checks
from fwbench.collector.conformance.heartbeat import heartbeat_checks
from fwbench.collector.conformance.lifecycle import lifecycle_checks
from fwbench.collector.conformance.longrun import stop_long_run
from fwbench.collector.conformance.longstep import long_step_checks
from fwbench.collector.conformance.model_files import model_checks
from fwbench.collector.conformance.services import metrics_checks, service_checks
from fwbench.collector.conformance.suite import Check, Outcome, Target, run_checks
from fwbench.collector.conformance.threads import thread_checks


class UnknownGroup(ValueError):
    """--checks names a group that does not exist."""


def check_groups(given: Sequence[str]) -> tuple[str, ...]:
    unknown = [g for g in given if g not in GROUPS]
    if unknown:
        raise UnknownGroup(f"unknown check group {unknown[0]!r}; groups: {', '.join(GROUPS)}")
    return tuple(given) or GROUPS


def _checks(target: Target, groups: Sequence[str], cells: CellSet) -> Iterator[Check]:
    describe = describe_checks()
    yield from describe if "describe" in groups else describe[:1]
    if "services" in groups:
        yield from service_checks()
    if "errors" in groups:
        yield from error_checks()
        yield from model_checks()
    if "cells" in groups:
        yield from cell_checks(target, cells)
    if "threads" in groups:
        yield from thread_checks()
    if "heartbeat" in groups:
        yield from heartbeat_checks()
        yield from long_step_checks()
    if "lifecycle" in groups:
        yield from lifecycle_checks()
    if "metrics" in groups:
        yield from metrics_checks()


def run_suite(
    target: Target,
    groups: Sequence[str] = GROUPS,
    cells: CellSet = CellSet.EACH,
    report: Callable[[Outcome], None] = lambda _: None,
) -> list[Outcome]:
    """Runs the checks of `groups` in order; stops what a failed check left running."""
    try:
        return run_checks(target, _checks(target, groups, cells), report)
    finally:
        stop_long_run(target)
        target.close()
