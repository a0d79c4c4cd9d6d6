"""Telling a hung or stuck agent from a long step, and a stalled agent from a frozen collector,
in bounded time that does not depend on the cell timeout. Agents of protocol 1.2 and later send
a Progress at least once per heartbeat interval (HEARTBEAT_SECONDS, agent.proto's header: 2 s)
while a run is active, repeating the last one when nothing new happened; its stage and
iterations_done are the measuring loop's progress (a stage with iterations reports its count
as it grows). A stopped or frozen process sends nothing; a process whose measuring thread is
stuck still beats, with the same stage and count. So, during a cell (CellWatch):

- progress is a Progress whose (stage, iterations_done) differs from the last one, or the
  result. No progress for `hang_seconds` (--hang-timeout, default HANG_SECONDS): the agent is
  hung (nothing at all came) or stuck (heartbeats, no progress); the call is cancelled, the
  cell fails as HUNG, and an agent the collector started is killed and started again so the
  rest of the sweep goes on (execute.py). The rule for legitimately long work: every single
  step must end within the hang timeout: the build, the first iteration (with any compilation
  it triggers), each warm-up or timed iteration, an accuracy workload's epoch. A build or a
  compilation of 50 s is not stuck; one of 70 s is, under the default: raise --hang-timeout
  for such cells (0 turns this off; the cell timeout still applies).
- a gap is the time between two events that the agent is to blame for: the collector's wait
  for the event, less the time the collector itself was frozen meanwhile (own_clock.py), or
  the difference of two Progress events' elapsed_seconds (the agent's own clock, which a
  collector that read late cannot stretch), whichever is longer. A gap that begins in
  STAGE_MEASURE longer than MEASURE_GAP_SECONDS (3 heartbeat intervals), or one anywhere longer
  than STALL_GAP_SECONDS, in a cell that then finished: the agent was stopped meanwhile (or the
  host froze it), so a sample (or the first iteration's time) may span the stall: the cell
  fails as STALLED, never `ok`, and keeps its samples for inspection.
- the collector is blamed for its own silence: time it spent frozen (own_clock.py) or busy
  with its own work (not waiting for the agent) never counts against the agent, so a frozen
  collector never kills a healthy agent as hung. When its own freeze made the time between two
  events longer than the gap limit (collector_frozen), whether it froze while waiting for the
  agent or while busy with the last event, it cannot vouch for the cell: execute.py measures it
  again, and fails it as COLLECTOR_FROZEN, naming the collector, when that happens twice.

Why 3 intervals (6 s) while measuring: a healthy agent sends an event at least every 2 s, and
the conformance suite fails one that ever goes 2 intervals (4 s) without; a third interval is
the margin for a loaded host. Outside the timed loop nothing measured is at stake but the
first iteration's time, and a framework's compilation may hold Python's GIL (which the
heartbeat needs), so the limit there stays 15 s. A stall shorter than the limit is not seen.

Agents of older protocol versions send no heartbeat: only the cell timeout applies to them.
agent.proto's header states the limits; tests/spec/test_protocol_text.py holds them to it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.defaults import HANG_SECONDS as HANG_SECONDS
from fwbench.collector.run.own_clock import OwnClock, own_clock
from fwbench.spec import HEARTBEAT_SECONDS

STALL_GAP_SECONDS = 15.0  # 7.5 heartbeat intervals
MEASURE_GAP_SECONDS = 6.0  # 3 heartbeat intervals: no sample may span a longer gap
HEARTBEAT_SINCE = (1, 2)  # the protocol version that added the heartbeat

STAGE_NAMES: dict[int, str] = {
    agent_pb2.STAGE_BUILD: "build",
    agent_pb2.STAGE_FIRST_ITERATION: "first iteration",
    agent_pb2.STAGE_WARMUP: "warm-up",
    agent_pb2.STAGE_MEASURE: "measure",
    agent_pb2.STAGE_PROFILE: "profile",  # since 1.10: steps under the profiler, after the loop
}


def sends_heartbeats(describe: agent_pb2.DescribeResponse) -> bool:
    major, _, minor = describe.spec_version.partition(".")
    try:
        return (int(major), int(minor)) >= HEARTBEAT_SINCE
    except ValueError:
        return False


class StallWatch:
    """Watches one Run call for silence alone (the conformance suite): cancels it when no event
    arrives for `hang_seconds` (None: never) and keeps the longest gap between events. Call
    event() for each event, stop() at the end."""

    def __init__(self, call: Any, hang_seconds: float | None) -> None:
        self.call, self.hang_seconds = call, hang_seconds
        self.fired = False
        self.longest_gap = 0.0
        self._last = time.monotonic()
        self._timer: threading.Timer | None = None
        self._arm()

    def _arm(self) -> None:
        if self.hang_seconds:
            self._timer = threading.Timer(self.hang_seconds, self._fire)
            self._timer.daemon = True
            self._timer.start()

    def _fire(self) -> None:
        self.fired = True
        self.call.cancel()

    def event(self) -> None:
        now = time.monotonic()
        self.longest_gap = max(self.longest_gap, now - self._last)
        self._last = now
        self.stop()
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class CellWatch:
    """Watches one Run call of a cell (the rules above): iterate events(), then stop(). After
    a cancel, `fired` says why (completing "agent NAME ..."); after the result, longest_gap,
    longest_measure_gap and collector_frozen say what the cell went through."""

    def __init__(
        self,
        call: Any,
        hang_seconds: float | None,
        clock: OwnClock | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.call, self.hang_seconds = call, hang_seconds
        self._clock, self._now = clock or own_clock(), now
        self._lock = threading.Lock()
        self.fired = ""
        self.longest_gap = self.longest_measure_gap = self.collector_frozen = 0.0
        self._stage = agent_pb2.STAGE_UNSPECIFIED
        self._key: tuple[int, int] | None = None
        self._elapsed: float | None = None
        self._blamed = 0.0  # the agent's silent seconds since the last progress
        self._beats = 0  # events without progress since the last progress
        self._since: float | None = None  # when the collector began to wait, while it waits
        self._handled = self._now()  # when the collector last took an event
        self._timer: threading.Timer | None = None
        self._generation = 0
        with self._lock:
            self._arm(hang_seconds)

    def events(self) -> Iterator[agent_pb2.RunResponse]:
        iterator = iter(self.call)
        while True:
            with self._lock:
                self._since = self._now()
            try:
                event = next(iterator)
            except StopIteration:
                return
            self._event(event)
            yield event

    def _event(self, event: agent_pb2.RunResponse) -> None:
        now = self._now()
        with self._lock:
            start, self._since = self._since or now, None
            frozen = self._clock.frozen_within(start, now)
            waited = max(0.0, now - start - frozen)
            gap = waited
            progress = event.progress if event.HasField("progress") else None
            if progress is not None and progress.elapsed_seconds > 0:
                if self._elapsed is not None:
                    gap = max(gap, progress.elapsed_seconds - self._elapsed)
                self._elapsed = progress.elapsed_seconds
            measuring = self._stage == agent_pb2.STAGE_MEASURE
            limit = MEASURE_GAP_SECONDS if measuring else STALL_GAP_SECONDS
            # Long only because the collector was frozen, while it waited or while it was busy
            # with the last event (the agent's events then wait in the call: a short wait).
            span, self._handled = now - self._handled, now
            frozen_span = self._clock.frozen_within(now - span, now)
            if span > limit >= max(gap, span - frozen_span):
                self.collector_frozen = max(self.collector_frozen, frozen_span)
            self.longest_gap = max(self.longest_gap, gap)
            if measuring:
                self.longest_measure_gap = max(self.longest_measure_gap, gap)
            key = None if progress is None else (progress.stage, progress.iterations_done)
            if key is None or key != self._key:
                self._key, self._blamed, self._beats = key, 0.0, 0
                self._arm(self.hang_seconds)
            else:
                self._blamed += waited
                self._beats += 1
            if progress is not None:
                self._stage = progress.stage

    def _arm(self, seconds: float | None) -> None:
        """(Re)starts the hang timer; the caller holds the lock."""
        self._generation += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.hang_seconds and seconds:
            self._timer = threading.Timer(seconds, self._fire, (self._generation,))
            self._timer.daemon = True
            self._timer.start()

    def _fire(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation:  # progress came, or the watch stopped
                return
            assert self.hang_seconds
            silent = 0.0
            if self._since is not None:  # waiting for the agent now
                now = self._now()
                silent = max(0.0, now - self._since - self._clock.frozen_within(self._since, now))
            left = self.hang_seconds - self._blamed - silent
            if left > 0.01:  # the collector was frozen or busy meanwhile: not the agent's time
                self._arm(left)
                return
            self.fired = self._why(silent)
        self.call.cancel()

    def _why(self, silent: float) -> str:
        hang = self.hang_seconds
        if not self._beats:
            return (
                f"sent nothing for {hang:g} s (it sends a heartbeat every "
                f"{HEARTBEAT_SECONDS:g} s while it runs): hung, stopped or frozen"
            )
        stage, done = self._key or (agent_pb2.STAGE_UNSPECIFIED, 0)
        at = f"at {STAGE_NAMES.get(stage, 'the start')}, {done} iterations done"
        if silent > 1.5 * HEARTBEAT_SECONDS:  # not even beating now: a live one beats
            return (
                f"made no progress for {hang:g} s ({at}) and sent nothing for the last "
                f"{silent:.0f} s: hung, stopped or frozen"
            )
        return (
            f"sent heartbeats but made no progress for {hang:g} s ({at}): its measuring thread "
            "is stuck, or one step (a build, a compilation, an iteration) takes longer than "
            "--hang-timeout"
        )

    def stop(self) -> None:
        with self._lock:
            self.hang_seconds = None
            self._arm(None)
