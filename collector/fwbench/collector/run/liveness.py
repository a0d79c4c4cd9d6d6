"""Telling a hung agent from a long step, in bounded time that does not depend on the cell
timeout. Agents of protocol 1.2 and later send a Progress at least once per heartbeat interval
(HEARTBEAT_SECONDS, agent.proto's header: 2 s) while a run is active; a stopped or frozen
process sends nothing. So, during a cell:

- no event for `hang_seconds` (default HANG_SECONDS): the agent is hung; the call is cancelled,
  the cell fails, and an agent the collector started is killed and started again so the rest
  of the sweep goes on (execute.py);
- a gap of more than STALL_GAP_SECONDS between two events, in a cell that then finished: the
  agent was stopped meanwhile (or the host froze it), so a sample may span the stall: the cell
  fails as stalled, never `ok`.

Agents of older protocol versions send no heartbeat: only the cell timeout applies to them.
agent.proto's header states both limits; tests/spec/test_protocol_text.py holds them to it."""

from __future__ import annotations

import threading
import time
from typing import Any

from fwbench.agent.v1 import agent_pb2

HANG_SECONDS = 60.0  # 30 heartbeat intervals
STALL_GAP_SECONDS = 15.0  # 7.5 heartbeat intervals
HEARTBEAT_SINCE = (1, 2)  # the protocol version that added the heartbeat


def sends_heartbeats(describe: agent_pb2.DescribeResponse) -> bool:
    major, _, minor = describe.spec_version.partition(".")
    try:
        return (int(major), int(minor)) >= HEARTBEAT_SINCE
    except ValueError:
        return False


class StallWatch:
    """Watches one Run call: cancels it when no event arrives for `hang_seconds` (None: never)
    and keeps the longest gap between events. Call event() for each event, stop() at the end."""

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
