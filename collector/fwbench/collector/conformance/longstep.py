"""One step longer than the collector's stall limit (agent.proto, Run: through a long step the
heartbeat repeats the last Progress). The heartbeat check (heartbeat.py) watches steps of
microseconds: an agent that sends a Progress only as a step ends passes it, and fails a real
`collector run` only where one step outlasts the stall limit (run/liveness.py: a gap over
MEASURE_GAP_SECONDS while measuring). So this check makes such a step within what the agent
declares: the long run's cell grown (growth.py), run with no warm-up and one timed step (a
trial: its first iteration and its timed step both take the grown size's time).

A step's time is measured, never derived: FLOPs do not say it (the tests' fake agent sleeps in
proportion to one parameter of three, a framework's gemm is cubic in them, and a small size's
step is mostly overhead: the NumPy example's 64x64x64 took 0.5 ms, its 932x932x932 19 ms, read
as a power of 0.45 of the FLOPs, which sized its next trial at 16227 a side, a step of well
over a minute). So the power of the FLOPs that the step time grows with comes from the last two
trials of at least CLEAN_SECONDS (the work, not the overhead), and is 1 (FLOP-proportional: a
trial comes out short wherever the time grows slower, as the fake's does) until there are two,
or where the larger of them was no longer than the smaller (noise).
Each trial aims at PROBE_SECONDS until one has lasted half that (no prediction then stretches
more than 16x), then at STEP_SECONDS, twice the measuring stall limit. A trial whose stream was
silent for longer than LATE_SECONDS (the suite's own freezes left out) fails the check; the
first whose step outlasted MEASURE_GAP_SECONDS without such a silence passes it. A trial waits
a Hung out only after the stall limit plus twice the step it was predicted to take: a silence
through the step the check itself made long is this check's failure, not a hang. Where the
limits stop the growth before a step that long, the check is skipped naming the longest step
they allowed; where MAX_TRIALS or CHECK_SECONDS run out first, naming the longest it saw."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import grpc

from fwbench.collector.conformance.cells import cheapest, check_reply, is_accuracy
from fwbench.collector.conformance.growth import Growth
from fwbench.collector.conformance.heartbeat import LATE_SECONDS, require_heartbeat
from fwbench.collector.conformance.longrun import run_when_free, stop_long_run
from fwbench.collector.conformance.suite import Check, Failed, Skipped, Target
from fwbench.collector.run.liveness import MEASURE_GAP_SECONDS, STALL_GAP_SECONDS
from fwbench.spec import HEARTBEAT_SECONDS

STEP_SECONDS = 2 * MEASURE_GAP_SECONDS
PROBE_SECONDS = STEP_SECONDS / 8
CLEAN_SECONDS = PROBE_SECONDS / 16  # a timed step this long is mostly the work itself
MIN_POWER, MAX_POWER = 0.25, 3.0  # of the FLOPs, that the step time grows with
MAX_TRIALS = 8
CHECK_SECONDS = 75.0  # no trial starts that would end the check later than this


@dataclass(frozen=True)
class Trial:
    scale: float
    label: str  # the cell and its size
    flops: float
    sample: float  # the timed step, seconds (the agent's own sample)
    step: float  # the longer of the first iteration and the timed step
    gap: float  # the longest silence the agent is to blame for, seconds


def _trial(target: Target, growth: Growth, scale: float, predicted: float) -> Trial:
    """One run of the cell at `scale`, checked as a cell is (cells.py), silent for at most the
    stall limit plus twice the step it is `predicted` to take before it counts as hung."""
    request = growth.request(scale)
    progress, result, watch = run_when_free(target, request, slack=2 * predicted)
    check_reply(target, request, progress, result)
    sample = result.sample_nanoseconds[0] / 1e9
    step = max(sample, result.first_iteration_nanoseconds / 1e9)
    return Trial(scale, growth.label(scale), growth.flops(scale), sample, step, watch.longest_gap)


def _power(trials: list[Trial]) -> float:
    """The power of the FLOPs that the step time grows with, through the last two trials of
    at least CLEAN_SECONDS; 1 until there are two."""
    clean = [t for t in trials if t.sample >= CLEAN_SECONDS]
    if len(clean) < 2:
        return 1.0
    before, last = clean[-2], clean[-1]
    if last.flops <= before.flops or last.sample <= before.sample:
        # A larger step no longer than a smaller one is the host's noise, not the power: the
        # smallest power would grow the next step the most (a step of minutes, waited out as
        # hung, on a loaded 2-vCPU host); FLOP-proportional at worst comes out short.
        return 1.0
    power = math.log(last.sample / before.sample) / math.log(last.flops / before.flops)
    return min(max(power, MIN_POWER), MAX_POWER)


def _next(growth: Growth, trials: list[Trial]) -> tuple[float, float]:
    """(the next trial's scale, the step it is predicted to take)."""
    last, power = trials[-1], _power(trials)
    aim = STEP_SECONDS if last.sample >= PROBE_SECONDS / 2 else PROBE_SECONDS
    scale = growth.scale_for(last.flops * (aim / last.sample) ** (1 / power))
    return scale, last.sample * (growth.flops(scale) / last.flops) ** power


def _silent(trial: Trial) -> str:
    return (
        f"{trial.label}: the step lasted {trial.step:.1f} s and the agent sent nothing for "
        f"{trial.gap:.1f} s of it: agent.proto asks for a Progress at least every "
        f"{HEARTBEAT_SECONDS:g} s while a run is active, the last one repeated through a long "
        f"step; `collector run` fails a cell silent for more than {MEASURE_GAP_SECONDS:g} s "
        f"while it measures ({STALL_GAP_SECONDS:g} s before) as stalled"
    )


def _long_step(target: Target) -> str:
    require_heartbeat(target)
    support = cheapest(target)
    if is_accuracy(target, support.name):
        raise Skipped(f"the cheapest workload, {support.name}, trains to accuracy: no step size")
    stop_long_run(target)  # the heartbeat check's: these runs need the agent free
    growth = Growth(target, support)
    start = time.monotonic()
    trials: list[Trial] = []
    scale, predicted, runs = 1.0, 0.0, 0
    while True:
        runs += 1
        try:
            trials.append(_trial(target, growth, scale, predicted))
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or not trials:
                raise
            growth.exhausted(scale, trials[-1].scale)
        else:
            trial = trials[-1]
            if trial.gap > LATE_SECONDS:
                raise Failed(_silent(trial))
            if trial.step > MEASURE_GAP_SECONDS:
                return (
                    f"{trial.label}: a step of {trial.step:.1f} s, longest silence "
                    f"{trial.gap:.1f} s ({runs} runs, {time.monotonic() - start:.0f} s)"
                )
        longest = max(trials, key=lambda t: t.step)
        seen = f"the longest, {longest.label}, lasted {longest.step:.3g} s"
        scale, predicted = _next(growth, trials)
        if scale <= trials[-1].scale * 1.01:
            raise Skipped(
                f"no step longer than the {MEASURE_GAP_SECONDS:g} s stall limit within "
                f"{growth.bound}: {seen}"
            )
        if runs >= MAX_TRIALS or time.monotonic() - start + 2 * predicted > CHECK_SECONDS:
            raise Skipped(
                f"no step longer than the {MEASURE_GAP_SECONDS:g} s stall limit in "
                f"{runs} runs within {CHECK_SECONDS:g} s: {seen}; the next, "
                f"{growth.label(scale)}, would take about {predicted:.0f} s"
            )


def long_step_checks() -> list[Check]:
    return [
        (
            f"heartbeat: a Progress every {HEARTBEAT_SECONDS:g} s through a step over "
            f"{MEASURE_GAP_SECONDS:g} s",
            _long_step,
        )
    ]
