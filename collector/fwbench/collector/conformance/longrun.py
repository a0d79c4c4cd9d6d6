"""The long run the heartbeat and lifecycle checks share: the cheapest declared workload asked
to run for an hour (min_seconds at the catalogue's maximum), consumed on a thread that notes
when each event came. Its shape parameters are LONG_PARAM (within the declared limits, never
above the default) rather than their minimum: the catalogue caps a run's iterations (10^7),
and a fast agent's 1x1 gemm steps reached that cap in 12 s, before the heartbeat check's
window ended. The first check that needs it starts it; it goes on until a check stops it
(Cancel) or the suite ends. Waiting for it is bounded like any Run stream (suite.py): silent
for the collector's stall limit, it is hung; without progress (its heartbeats repeating one
stage and count) for the collector's hang limit before it measures, it is stuck. From its first
STAGE_MEASURE on, the heartbeat check judges its count."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.conformance.cells import cell_request, cheapest, default_cell
from fwbench.collector.conformance.suite import (
    Failed,
    Hung,
    Stuck,
    Target,
    call_failed,
    new_run_id,
    run_watched,
    silent,
    status_text,
    stuck,
)
from fwbench.collector.run.liveness import CellWatch
from fwbench.collector.run.own_clock import own_clock

STOP_SECONDS = 30.0  # for a cancelled or timed-out run to end, and the agent to take another
LONG_PARAM = 64  # gemm 64x64x64: microseconds a step, 10^7 steps well past a minute
_LONG = "long run"


def long_params(support: agent_pb2.WorkloadSupport) -> dict[str, int]:
    """Every declared parameter at LONG_PARAM, or its default when smaller, within its limits
    and a multiple of its multiple_of."""
    params = {}
    for limit in support.params:
        step = max(limit.multiple_of, 1)
        value = -(-max(limit.min_value, min(limit.default_value, LONG_PARAM)) // step) * step
        params[limit.name] = value if value <= limit.max_value else limit.max_value // step * step
    return params


class LongRun:
    """The cheapest cell asked to run for an hour, consumed on a thread."""

    def __init__(self, target: Target) -> None:
        limits = target.catalogue.run_limits
        support = cheapest(target)
        self.request = cell_request(
            target,
            default_cell(support),
            params=long_params(support),
            min_iterations=1,
            max_iterations=limits["max_iterations"].max,
            min_seconds=target.catalogue.min_seconds_max,
        )
        own_clock()  # ticking from now on: longest_gap and longest_standstill ask it
        self.started = time.monotonic()
        self.ended: float | None = None
        # (monotonic time, stage, iterations_done) of each Progress
        self.events: list[tuple[float, int, int]] = []
        self.call: Iterator[agent_pb2.RunResponse] = target.client.run(self.request, None)
        # `collector run`'s hang rule until it measures (it cancels the call when it fires).
        self.watch = CellWatch(self.call, target.hang_seconds())
        self.measuring = threading.Event()
        self.done = threading.Event()
        self.outcome = ""
        self.code: grpc.StatusCode | None = None
        threading.Thread(target=self._consume, daemon=True).start()

    def _consume(self) -> None:
        try:
            for event in self.watch.events():
                if event.HasField("result"):
                    self.outcome = "it finished with a RunResult"
                    continue
                progress = event.progress
                self.events.append((time.monotonic(), progress.stage, progress.iterations_done))
                if event.progress.stage == agent_pb2.STAGE_MEASURE:
                    self.watch.stop()
                    self.measuring.set()
            self.outcome = self.outcome or "its stream ended OK without a RunResult"
        except grpc.RpcError as error:
            self.code = error.code()
            self.outcome = f"it ended with {status_text(error)}"
        finally:
            self.watch.stop()
            self.ended = time.monotonic()
            self.done.set()
            self.measuring.set()

    def running(self) -> bool:
        return not self.done.is_set()

    def silent_for(self) -> float:
        events = list(self.events)
        return time.monotonic() - (events[-1][0] if events else self.started)

    def longest_gap(self) -> tuple[float, float, int]:
        """(seconds, when it began in seconds since the start, the stage before it) of the
        longest time without a Progress, from the Run call to its end or now, less the time
        this process itself was frozen in it (run/own_clock.py: what arrived meanwhile is
        read when it wakes, and its silence is not the agent's)."""
        times = [self.started] + [t for t, _, _ in self.events]
        stages = [agent_pb2.STAGE_UNSPECIFIED] + [s for _, s, _ in self.events]
        times.append(self.ended if self.ended is not None else time.monotonic())
        clock = own_clock()
        gap, index = max(
            (b - a - clock.frozen_within(a, b), i)
            for i, (a, b) in enumerate(itertools.pairwise(times))
        )
        return gap, times[index] - self.started, stages[index]

    def longest_standstill(self) -> tuple[float, int]:
        """(seconds, iterations_done) of the longest stretch of STAGE_MEASURE in which
        iterations_done did not change, less this process's own freezes in it; to its end or
        now while measuring."""
        measured = [(t, n) for t, stage, n in self.events if stage == agent_pb2.STAGE_MEASURE]
        if not measured:
            return 0.0, 0
        clock, longest, (since, count) = own_clock(), (0.0, measured[0][1]), measured[0]
        end = self.ended if self.ended is not None else time.monotonic()
        ends: list[tuple[float, int | None]] = [*measured[1:], (end, None)]
        for at, done in ends:
            if done != count:
                still = at - since - clock.frozen_within(since, at)
                longest = max(longest, (still, count))
                if done is not None:
                    since, count = at, done
        return longest

    def stop(self) -> None:
        cancel = getattr(self.call, "cancel", None)
        if cancel is not None:
            cancel()


def long_run(target: Target) -> LongRun:
    """The long run of the target, started now if none is under way; waits until it measures
    (Hung when it stays silent for target.silence_seconds(), Stuck when it makes no progress for
    target.hang_seconds(), Failed after the cell timeout)."""
    run = target.notes.get(_LONG)
    if not isinstance(run, LongRun) or not run.running():
        run = LongRun(target)
        target.notes[_LONG] = run
    silence = target.silence_seconds()
    deadline = time.monotonic() + target.cell_timeout_seconds
    while not run.measuring.wait(0.1):
        if silence and run.silent_for() > silence:
            stop_long_run(target)
            raise Hung(f"the long run: {silent(silence, len(run.events))}")
        if time.monotonic() > deadline:
            raise Failed(
                f"the long run sent no STAGE_MEASURE progress in "
                f"{target.cell_timeout_seconds:.0f} s"
            )
    if run.watch.fired:
        stop_long_run(target)
        raise Stuck(stuck("the long run", run.watch.fired))
    if not run.running():
        raise Failed(
            f"the long run (min_seconds {run.request.min_seconds:.0f}) stopped: {run.outcome}"
        )
    return run


def forget_long_run(target: Target, run: LongRun) -> None:
    """After a check stopped the long run (or made the agent stop it): waits for its stream to
    end, so that the next check's long run finds the agent free, and forgets it."""
    if not run.done.wait(STOP_SECONDS):
        run.stop()
    target.notes.pop(_LONG, None)


def stop_long_run(target: Target) -> None:
    run = target.notes.pop(_LONG, None)
    if isinstance(run, LongRun):
        run.stop()


def run_when_free(
    target: Target, request: agent_pb2.RunRequest, slack: float = 0.0
) -> tuple[list[agent_pb2.Progress], agent_pb2.RunResult, CellWatch]:
    """run_watched(request) under a new run id, once the agent takes it: FAILED_PRECONDITION
    (still busy with a run just stopped) is retried for STOP_SECONDS, then raised."""
    start = time.monotonic()
    while True:
        request.run_id = new_run_id()
        try:
            return run_watched(target, request, slack=slack)
        except grpc.RpcError as error:
            busy = error.code() == grpc.StatusCode.FAILED_PRECONDITION
            if not busy or time.monotonic() - start > STOP_SECONDS:
                raise
            time.sleep(0.1)


def cancel(client: AgentClient, run_id: str) -> agent_pb2.CancelResponse:
    """Cancel as the agent answers it; Hung past its deadline, Failed for another status."""
    try:
        return client.cancel_reply(run_id)
    except grpc.RpcError as error:
        raise call_failed("Cancel", error) from None
