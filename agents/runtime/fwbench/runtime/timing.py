"""The measurement loop (../shared/METHOD.md): build untimed but reported, the first
iteration timed on its own, warm-up discarded, then a timed loop until both a minimum
iteration count and a minimum duration are reached. The device is synchronized before every
clock read, and every raw sample is kept; statistics are the collector's job. A generation's
sample is one whole generation, whose prefill and decode steps are each timed too
(`GenerationTimer`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fwbench.runtime.plugin import BuiltStep, GenerationSteps

Clock = Callable[[], int]  # monotonic nanoseconds
ProgressCallback = Callable[[str, int], None]  # (stage, iterations done in that stage)

# How often a growing count goes out (a Progress the collector relays to its display and its
# hang check). A world's ranks report less often: each report wakes the rank's relay, gRPC and
# the collector on the rank's own CPU, which its stepping thread and the collective's threads
# already share (docs/lab/world-overhead.md); under the heartbeat interval (2 s) all the same,
# so the agent never has to repeat a count while the loop runs.
PROGRESS_SECONDS = 0.5
WORLD_PROGRESS_SECONDS = 1.5


class RunCancelled(Exception):
    """The run's cancel event was set; raised between iterations."""


@dataclass(frozen=True)
class LoopPlan:
    warmup_iterations: int
    min_iterations: int
    min_seconds: float
    max_iterations: int
    progress_interval_seconds: float = PROGRESS_SECONDS
    # After the timed loop: steps under the framework's profiler (0: none), and the folder
    # its trace goes to ("" for none): RunRequest.profile, profiling.py.
    profile_steps: int = 0
    trace_dir: str = ""


@dataclass
class Measurement:
    built: BuiltStep
    build_ns: int
    first_iteration_ns: int
    warmup_iterations: int
    samples_ns: list[int] = field(default_factory=list)
    measure_started_unix_ns: int = 0
    measure_ended_unix_ns: int = 0
    report: dict[str, str] = field(default_factory=dict)  # BuiltStep.report's, after the loop
    # A generation's parts, timed samples only: one prefill per sample, decode_steps decode
    # steps per sample, sample after sample.
    prefill_ns: list[int] = field(default_factory=list)
    decode_ns: list[int] = field(default_factory=list)


class GenerationTimer:
    """One whole generation per call, its prefill and every decode step timed on their own,
    the device synchronized before each clock read. `reset()` forgets what the first
    iteration and the warm-up recorded."""

    def __init__(
        self, steps: GenerationSteps, synchronize: Callable[[object], None], clock: Clock
    ) -> None:
        self._steps, self._synchronize, self._clock = steps, synchronize, clock
        self.prefill_ns: list[int] = []
        self.decode_ns: list[int] = []

    def __call__(self) -> None:
        clock, synchronize = self._clock, self._synchronize
        start = clock()
        synchronize(self._steps.prefill())
        end = clock()
        self.prefill_ns.append(end - start)
        for _ in range(self._steps.decode_steps):
            start = end
            synchronize(self._steps.decode())
            end = clock()
            self.decode_ns.append(end - start)

    def reset(self) -> None:
        self.prefill_ns, self.decode_ns = [], []


def measure(
    build: Callable[[], BuiltStep],
    synchronize: Callable[[object], None],
    plan: LoopPlan,
    cancel: threading.Event,
    on_progress: ProgressCallback,
    clock: Clock = time.perf_counter_ns,
) -> Measurement:
    """Runs one workload cell; blocks until done. Raises RunCancelled when `cancel` is set,
    and lets anything `build`, the step or `synchronize` raise propagate."""
    on_progress("build", 0)
    start = clock()
    built = build()
    build_ns = clock() - start
    timer = None
    step = built.step
    if built.generation is not None:
        timer = GenerationTimer(built.generation, synchronize, clock)
        step = timer

    _check(cancel)
    on_progress("first_iteration", 0)
    start = clock()
    synchronize(step())
    first_ns = clock() - start
    on_progress("first_iteration", 1)

    # The count goes out as it grows (every progress_interval_seconds), as in the timed loop:
    # the heartbeat repeats it, and a client takes a count that stops growing for its hang
    # timeout as a stuck loop (agent.proto, Heartbeat), so a long warm-up must show its steps.
    on_progress("warmup", 0)
    interval_ns = int(plan.progress_interval_seconds * 1e9)
    next_report = clock() + interval_ns
    for done in range(1, plan.warmup_iterations + 1):
        _check(cancel)
        synchronize(step())
        if done < plan.warmup_iterations and clock() >= next_report:
            on_progress("warmup", done)
            next_report = clock() + interval_ns
    on_progress("warmup", plan.warmup_iterations)

    result = Measurement(built, build_ns, first_ns, plan.warmup_iterations)
    if timer is not None:
        timer.reset()
    result.measure_started_unix_ns = time.time_ns()
    result.samples_ns = _timed_loop(step, synchronize, plan, cancel, on_progress, clock)
    result.measure_ended_unix_ns = time.time_ns()
    if timer is not None:
        result.prefill_ns, result.decode_ns = timer.prefill_ns, timer.decode_ns
    if built.report is not None:
        result.report = dict(built.report())
    return result


def _timed_loop(
    step: Callable[[], object],
    synchronize: Callable[[object], None],
    plan: LoopPlan,
    cancel: threading.Event,
    on_progress: ProgressCallback,
    clock: Clock,
) -> list[int]:
    samples: list[int] = []
    min_ns = int(plan.min_seconds * 1e9)
    interval_ns = int(plan.progress_interval_seconds * 1e9)
    on_progress("measure", 0)
    loop_start = clock()
    next_report = loop_start + interval_ns
    end = loop_start
    while len(samples) < plan.max_iterations and (
        len(samples) < plan.min_iterations or end - loop_start < min_ns
    ):
        if cancel.is_set():
            raise RunCancelled()
        start = clock()
        synchronize(step())
        end = clock()
        samples.append(end - start)
        if end >= next_report:
            on_progress("measure", len(samples))
            next_report = end + interval_ns
    on_progress("measure", len(samples))
    return samples


def _check(cancel: threading.Event) -> None:
    if cancel.is_set():
        raise RunCancelled()
