"""The measurement loop, with an injected clock: what is timed, what is discarded, when it
stops."""

from __future__ import annotations

import threading

import pytest

from fwbench.runtime.plugin import BuiltStep, Settings
from fwbench.runtime.timing import LoopPlan, RunCancelled, measure

SETTINGS = Settings("float32", 1, 1, "eager", "", "cpu")


class SteppingClock:
    """Advances by the duration of each step, which the step itself sets."""

    def __init__(self) -> None:
        self.now = 0
        self.pending = 0

    def __call__(self) -> int:
        self.now += self.pending
        self.pending = 0
        return self.now


def fake_step(clock: SteppingClock, durations: list[int], calls: list[str]) -> BuiltStep:
    def step() -> object:
        clock.pending = durations[min(len(calls), len(durations) - 1)]
        calls.append("step")
        return None

    return BuiltStep(step=step, settings=SETTINGS)


def run(plan: LoopPlan, durations: list[int], cancel: threading.Event | None = None):
    clock = SteppingClock()
    calls: list[str] = []
    stages: list[tuple[str, int]] = []
    synced: list[object] = []
    result = measure(
        lambda: fake_step(clock, durations, calls),
        synced.append,
        plan,
        cancel or threading.Event(),
        lambda stage, done: stages.append((stage, done)),
        clock=clock,
    )
    return result, calls, stages, synced


def test_measure_times_first_iteration_alone_and_discards_warmup():
    durations = [900, 50, 50, 10, 11, 12, 13]
    result, calls, _, _ = run(LoopPlan(2, 4, 0.0, 100), durations)
    assert result.first_iteration_ns == 900
    assert result.warmup_iterations == 2
    assert result.samples_ns == [10, 11, 12, 13]
    assert len(calls) == 1 + 2 + 4


def test_measure_synchronizes_every_step():
    _, calls, _, synced = run(LoopPlan(3, 5, 0.0, 100), [5])
    assert len(synced) == len(calls) == 9


def test_measure_runs_until_min_seconds_when_iterations_are_reached_early():
    result, _, _, _ = run(LoopPlan(0, 2, 1e-6, 10_000), [100])  # 1 µs = 10 steps of 100 ns
    assert len(result.samples_ns) == 10


def test_measure_stops_at_max_iterations():
    result, _, _, _ = run(LoopPlan(0, 5, 3600.0, 7), [100])
    assert len(result.samples_ns) == 7


def test_measure_reports_stages_in_order():
    _, _, stages, _ = run(LoopPlan(1, 3, 0.0, 100), [5])
    names = list(dict.fromkeys(stage for stage, _ in stages))
    assert names == ["build", "first_iteration", "warmup", "measure"]
    assert stages[-1] == ("measure", 3)


def test_measure_raises_when_cancelled():
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RunCancelled):
        run(LoopPlan(0, 3, 0.0, 100), [5], cancel)


def test_a_long_warmup_reports_its_count_as_it_grows():
    """The heartbeat repeats the last count; a count that stops growing for the collector's
    hang timeout is taken as a stuck loop, so a warm-up of many long steps shows them."""
    plan = LoopPlan(6, 2, 0.0, 100, progress_interval_seconds=0.5)
    _, _, stages, _ = run(plan, [300_000_000])  # 0.3 s a step
    warmup = [done for stage, done in stages if stage == "warmup"]
    assert warmup[0] == 0 and warmup[-1] == 6
    assert len(warmup) > 3 and warmup == sorted(set(warmup))


def test_a_short_warmup_sends_no_more_events_than_before():
    _, _, stages, _ = run(LoopPlan(50, 2, 0.0, 100), [1000])  # 1 µs steps
    assert [done for stage, done in stages if stage == "warmup"] == [0, 50]
