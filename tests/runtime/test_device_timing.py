"""Device time from event pairs (device_timing.py), with fake events on a fake device clock:
what is recorded, what is left out, and how it reaches the row (BuiltStep.report ->
Measurement.report -> EffectiveSettings.extra) without a GPU."""

from __future__ import annotations

import threading

from fwbench.runtime import device_timing
from fwbench.runtime.device_timing import EventTimer
from fwbench.runtime.plugin import BuiltStep, Settings, WorkloadSpec
from fwbench.runtime.service import _result_message
from fwbench.runtime.timing import LoopPlan, measure
from fwbench.spec import load_catalogue


class DeviceClock:
    """The device's time in ms; each step advances it by its own duration."""

    def __init__(self) -> None:
        self.now_ms = 0.0


class FakeEvent:
    def __init__(self, clock: DeviceClock) -> None:
        self.clock = clock
        self.at: float | None = None

    def record(self) -> None:
        self.at = self.clock.now_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        assert self.at is not None and end.at is not None, "event never recorded"
        return end.at - self.at


def timed_steps(durations_ms: list[float]) -> tuple[EventTimer, DeviceClock, list[int]]:
    clock = DeviceClock()
    calls: list[int] = []

    def step() -> object:
        clock.now_ms += durations_ms[min(len(calls), len(durations_ms) - 1)]
        calls.append(1)
        return None

    return EventTimer(step, lambda: FakeEvent(clock)), clock, calls


def test_the_median_device_time_leaves_out_the_first_call() -> None:
    timer, _, calls = timed_steps([500.0, 2.0, 3.0, 4.0, 100.0])
    for _ in range(5):
        timer()
    assert len(calls) == 5
    report = timer.report()
    assert report["device_time_median_ns"] == str(round(3.5 * 1e6))  # of 2, 3, 4, 100
    assert report["device_time_steps"] == "4"
    assert timer.report() == {}  # read once: the pairs are released


def test_only_the_latest_pairs_are_kept(monkeypatch) -> None:
    monkeypatch.setattr(device_timing, "MAX_PAIRS", 3)
    timer, _, _ = timed_steps([1.0, 9.0, 9.0, 9.0, 1.0, 1.0, 1.0])
    for _ in range(7):
        timer()
    assert timer.report()["device_time_median_ns"] == str(round(1e6))


def test_the_report_reaches_the_rows_settings_after_the_timed_loop() -> None:
    timer, _, calls = timed_steps([7.0])
    settings = Settings("float32", 1, 1, "eager", "", "cuda:0", {"tf32_matmul": "False"})
    built = BuiltStep(timer, settings, report=timer.report)
    plan = LoopPlan(2, 4, 0.0, 4)
    measurement = measure(lambda: built, lambda _: None, plan, threading.Event(), lambda *_: None)
    assert len(calls) == 1 + 2 + 4 and len(measurement.samples_ns) == 4
    assert measurement.report["device_time_steps"] == "6"  # warm-up 2 + timed 4
    assert measurement.report["device_time_median_ns"] == str(7_000_000)
    gemm = load_catalogue().get("gemm")
    spec = WorkloadSpec(gemm, "infer", 1, "float32", gemm.resolve_params({}), 0, 0, "eager")
    extra = _result_message("run", spec, measurement).settings.extra
    assert extra["device_time_median_ns"] == "7000000" and extra["tf32_matmul"] == "False"


def test_without_a_report_the_settings_are_the_plugins() -> None:
    settings = Settings("float32", 1, 1, "eager", "", "cpu", {"fake": "yes"})
    built = BuiltStep(lambda: None, settings)
    plan = LoopPlan(0, 2, 0.0, 2)
    measurement = measure(lambda: built, lambda _: None, plan, threading.Event(), lambda *_: None)
    assert measurement.report == {}
