"""The collector's own clock: when the collector itself did not run. A frozen collector (SIGSTOP
of its process, a paused container, a host that starved it) reads nothing from the agents
meanwhile, and a silence it did not hear must not be blamed on them (liveness.py).

A daemon thread ticks every TICK_SECONDS; a tick that comes more than FROZEN_AFTER_SECONDS
after the previous one means the whole process was frozen in between (the ticker sleeps, it
holds nothing another thread could block it on but the GIL, which Python hands over every
5 ms). A freeze still under way when asked (the ticker has not run since the process came
back) counts up to the moment asked about."""

from __future__ import annotations

import threading
import time

TICK_SECONDS = 0.2
FROZEN_AFTER_SECONDS = 1.0  # a tick this late: the collector was frozen
KEEP_FREEZES = 1000  # the most recent freezes kept (a cell asks about its own minutes)


class OwnClock:
    """Freezes of this process, as (start, end) on time.monotonic()."""

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        self._tick_seconds = tick_seconds
        self._lock = threading.Lock()
        self._last_tick = time.monotonic()
        self._freezes: list[tuple[float, float]] = []
        self._thread = threading.Thread(target=self._run, name="fwbench-own-clock", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            time.sleep(self._tick_seconds)
            self.tick(time.monotonic())

    def tick(self, now: float) -> None:
        with self._lock:
            if now - self._last_tick > FROZEN_AFTER_SECONDS:
                self._freezes.append((self._last_tick, now))
                del self._freezes[:-KEEP_FREEZES]
            self._last_tick = now

    def frozen_within(self, start: float, end: float) -> float:
        """Seconds of [start, end] during which the collector was frozen."""
        with self._lock:
            freezes = list(self._freezes)
            if end - self._last_tick > FROZEN_AFTER_SECONDS:  # frozen until just now
                freezes.append((self._last_tick, end))
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in freezes)


_clock: OwnClock | None = None
_clock_lock = threading.Lock()


def own_clock() -> OwnClock:
    """The process's one ticker, started on first use."""
    global _clock
    with _clock_lock:
        if _clock is None:
            _clock = OwnClock()
        return _clock
