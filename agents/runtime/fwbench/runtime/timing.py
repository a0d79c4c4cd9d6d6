"""The measurement loop (../shared/METHOD.md): build untimed but reported, the first
iteration timed on its own, warm-up discarded, then a timed loop until both a minimum
iteration count and a minimum duration are reached. The device is synchronized before every
clock read, and every raw sample is kept; statistics are the collector's job."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from fwbench.runtime.plugin import BuiltStep

Clock = Callable[[], int]  # monotonic nanoseconds
ProgressCallback = Callable[[str, int], None]  # (stage, iterations done in that stage)


class RunCancelled(Exception):
    """The run's cancel event was set; raised between iterations."""


@dataclass(frozen=True)
class LoopPlan:
    warmup_iterations: int
    min_iterations: int
    min_seconds: float
    max_iterations: int
    progress_interval_seconds: float = 0.5


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

    _check(cancel)
    on_progress("first_iteration", 0)
    start = clock()
    synchronize(built.step())
    first_ns = clock() - start
    on_progress("first_iteration", 1)

    on_progress("warmup", 0)
    for _ in range(plan.warmup_iterations):
        _check(cancel)
        synchronize(built.step())
    on_progress("warmup", plan.warmup_iterations)

    result = Measurement(built, build_ns, first_ns, plan.warmup_iterations)
    result.measure_started_unix_ns = time.time_ns()
    result.samples_ns = _timed_loop(built, synchronize, plan, cancel, on_progress, clock)
    result.measure_ended_unix_ns = time.time_ns()
    if built.report is not None:
        result.report = dict(built.report())
    return result


def _timed_loop(
    built: BuiltStep,
    synchronize: Callable[[object], None],
    plan: LoopPlan,
    cancel: threading.Event,
    on_progress: ProgressCallback,
    clock: Clock,
) -> list[int]:
    step = built.step
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
