"""The heartbeat (agent.proto, Run; protocol 1.2): while a run is active the agent sends a
Progress at least once per heartbeat interval (HEARTBEAT_SECONDS), so that a client tells a
long step from a stopped or frozen agent. `collector run` relies on it (run/liveness.py): a
cell silent for STALL_GAP_SECONDS fails as stalled, one silent for HANG_SECONDS is cancelled as
hung. So the check watches the long run (longrun.py) from its Run call until it has gone on
past the stall limit (WINDOW_SECONDS), and fails any silence longer than LATE_SECONDS, two
intervals: a heartbeat missed. Progress, not only life (agent.proto, Run): a heartbeat whose
iterations_done stands still through STANDSTILL_SECONDS of the long run's measuring (steps of
microseconds) fails too, as `collector run` would cancel it as hung after HANG_SECONDS. Time
the suite's own process was frozen (run/own_clock.py) is not counted against the agent.

What it cannot see is one long step: the long run's steps are short. It catches an agent
silent through a stage (nothing between the stage's first and last Progress, however long it
lasts); an agent that reports every step but sends no heartbeat passes it, and fails only on a
step longer than the stall limit, which the long-step check (longstep.py) makes."""

from __future__ import annotations

import time

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.longrun import long_run
from fwbench.collector.conformance.suite import Check, Failed, Skipped, Target
from fwbench.collector.run.liveness import (
    HANG_SECONDS,
    HEARTBEAT_SINCE,
    STALL_GAP_SECONDS,
    sends_heartbeats,
)
from fwbench.spec import HEARTBEAT_SECONDS

LATE_SECONDS = 2 * HEARTBEAT_SECONDS
# The long run's steps take microseconds to milliseconds: iterations_done still this long in
# STAGE_MEASURE is a measuring loop that stopped while something else sends the heartbeat.
STANDSTILL_SECONDS = 10.0
WINDOW_SECONDS = STALL_GAP_SECONDS + 2.0


def require_heartbeat(target: Target) -> None:
    """Skipped for an agent whose protocol predates the heartbeat: it owes none."""
    version = target.described().spec_version
    if not sends_heartbeats(target.described()):
        since = ".".join(map(str, HEARTBEAT_SINCE))
        raise Skipped(f"spec_version {version} predates the heartbeat (protocol {since})")


def _heartbeat(target: Target) -> str:
    require_heartbeat(target)
    run = long_run(target)
    end = run.started + WINDOW_SECONDS
    while run.running() and time.monotonic() < end:
        time.sleep(min(0.2, max(end - time.monotonic(), 0.0)))
    gap, at, stage = run.longest_gap()
    if gap > LATE_SECONDS:
        after = agent_pb2.Stage.Name(stage) if stage else "the Run call"
        raise Failed(
            f"the long run sent nothing for {gap:.1f} s, from {at:.1f} s into it (after "
            f"{after}): agent.proto asks for a Progress at least every {HEARTBEAT_SECONDS:g} s "
            "while a run is active, the last one repeated through a long step; `collector "
            f"run` fails a cell silent for {STALL_GAP_SECONDS:g} s as stalled and cancels one "
            f"silent for {HANG_SECONDS:g} s as hung"
        )
    still, done = run.longest_standstill()
    if still > STANDSTILL_SECONDS:
        raise Failed(
            f"iterations_done stood at {done} for {still:.1f} s of STAGE_MEASURE (the long "
            "run's steps take microseconds): its Progress says the agent lives, not that it "
            "measures; agent.proto asks for the measuring loop's count, and `collector run` "
            f"cancels a cell whose progress stands still for {HANG_SECONDS:g} s as hung"
        )
    if not run.running():
        raise Failed(
            f"the long run (min_seconds {run.request.min_seconds:.0f}) stopped: {run.outcome}"
        )
    return (
        f"longest silence {gap:.1f} s, longest standstill {still:.1f} s, in "
        f"{time.monotonic() - run.started:.0f} s"
    )


def heartbeat_checks() -> list[Check]:
    return [
        (
            f"heartbeat: a Progress every {HEARTBEAT_SECONDS:g} s for {WINDOW_SECONDS:g} s",
            _heartbeat,
        )
    ]
