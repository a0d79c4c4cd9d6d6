"""Device time per step from pairs of timing events (CUDA events), beside the wall clock.

The timed loop's samples stay wall-clock (perf_counter_ns around step + synchronize): they
include the host's launch work, which is what a user waits for. A plugin on a device with
timing events can also wrap its step in an EventTimer: each call records an event before and
after the step on the device's stream; after the loop, `report()` reads the elapsed device
time of each pair (the device has been synchronized by then) and returns their median and
count, which join the row's settings.extra (BuiltStep.report). Framework-free: the plugin
hands in how to make an event (torch: `torch.cuda.Event(enable_timing=True)`); events need
`record()` and `elapsed_time(end) -> milliseconds`, as torch's have.

The first call (compilation, cuDNN autotuning) is left out; warm-up calls are in, so the
figure covers the warm-up and timed iterations alike. Only the last MAX_PAIRS pairs are kept,
so a long loop of tiny steps holds a bounded number of events: the latest, i.e. timed ones."""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from typing import Protocol

MAX_PAIRS = 10_000


class TimingEvent(Protocol):
    def record(self) -> None: ...

    def elapsed_time(self, end: TimingEvent) -> float: ...  # milliseconds


class EventTimer:
    """`timer()` runs `step` between two recorded events; `timer.report()` after the loop."""

    def __init__(self, step: Callable[[], object], new_event: Callable[[], TimingEvent]) -> None:
        self._step = step
        self._new_event = new_event
        self._pairs: deque[tuple[TimingEvent, TimingEvent]] = deque(maxlen=MAX_PAIRS)
        self._calls = 0

    def __call__(self) -> object:
        start, end = self._new_event(), self._new_event()
        start.record()
        output = self._step()
        end.record()
        self._calls += 1
        if self._calls > 1:  # the first call: compilation and autotuning, as first_iteration
            self._pairs.append((start, end))
        return output

    def report(self) -> dict[str, str]:
        """Median device time of the recorded calls (ns) and how many; {} when none."""
        times_ms = [start.elapsed_time(end) for start, end in self._pairs]
        self._pairs.clear()
        if not times_ms:
            return {}
        return {
            "device_time_median_ns": str(round(statistics.median(times_ms) * 1e6)),
            "device_time_steps": str(len(times_ms)),
            "device_time_clock": "CUDA events around each step after the first",
        }
