"""Where a decided gap lives (`collector explain`, docs/profiling.md): two agents' profiles of
the same cell, in the common classes of operations, turned into the difference of their timed
medians split over the classes.

Each side's timed median is split by its profile's shares (a class's seconds per profiled step
over the profiled step, "outside" and "unmapped" included, so the shares sum to 1); a class's
part of the gap is the agent's part less the baseline's, and the parts add up to the gap
exactly. The profiler's own time is in the profiled steps (profile_effect, the profiled step
over the timed median): spread over a side's classes, it can shift at most (1 - 1/effect) of
that side's median between them, so `distortion`, both sides' such shift over the gap, bounds
how far the attribution can be off. Nothing is attributed that the comparison did not decide
(faster or slower), nor where the distortion passes MAX_DISTORTION, nor where the classes
cover less than MIN_COVERAGE of a side's profiled step: each such comparison says why."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from fwbench.collector.analysis.comparison import Comparison
from fwbench.collector.analysis.contenders import Contender, RunData

DECIDED = ("faster", "slower")
MAX_DISTORTION = 0.5  # the profiler's own time may move at most half the gap between classes
MIN_COVERAGE = 0.5  # of each side's profiled step, in classed operations
TOP_OPERATIONS = 3  # named on each side


@dataclass(frozen=True)
class ClassGap:
    op_class: str
    baseline_seconds: float  # the class's part of the baseline's timed median
    agent_seconds: float
    share_of_gap: float  # (agent - baseline) / gap: the parts' shares sum to 1

    @property
    def gap_seconds(self) -> float:
        return self.agent_seconds - self.baseline_seconds


@dataclass(frozen=True)
class Attribution:
    """One comparison's gap over the classes, largest share first; or why there is none."""

    comparison: Comparison
    classes: tuple[ClassGap, ...] = ()
    not_attributed: str = ""
    coverage: tuple[float, float] = (math.nan, math.nan)  # baseline's, agent's
    effect: tuple[float, float] = (math.nan, math.nan)
    top: tuple[tuple[Any, ...], tuple[Any, ...]] = ((), ())  # [name, class, seconds] each side
    profilers: tuple[str, str] = ("", "")
    distortion: float = math.nan  # how much of the gap the profiler's own time could move

    @property
    def gap_seconds(self) -> float:
        c = self.comparison
        return c.median_seconds - c.baseline_median_seconds


def attribute(
    run: RunData, comparisons: Sequence[Comparison], cells: Sequence[Contender]
) -> list[Attribution]:
    """An Attribution for every comparison within the run (agent against baseline)."""
    by = {(c.agent, c.mode, c.key): c for c in cells}
    found = []
    for comparison in comparisons:
        agent = by.get((comparison.agent, comparison.mode, comparison.key))
        base = by.get((comparison.baseline, comparison.baseline_mode, comparison.key))
        found.append(_attribute(run.results, comparison, base, agent))
    return found


def _attribute(
    results: pd.DataFrame,
    comparison: Comparison,
    base: Contender | None,
    agent: Contender | None,
) -> Attribution:
    if comparison.verdict not in DECIDED:
        why = f"the comparison is {comparison.verdict}: only a decided gap is attributed"
        return Attribution(comparison, not_attributed=why)
    sides = []
    for name, contender in ((comparison.baseline, base), (comparison.agent, agent)):
        rows = pd.DataFrame() if contender is None else profiled_rows(results, contender)
        if rows.empty:
            note = _note(results, contender)
            return Attribution(comparison, not_attributed=f"{name} has no profile here{note}")
        sides.append(rows)
    effect = tuple(float(rows["profile_effect"].mean()) for rows in sides)
    coverage = tuple(float(rows["profile_coverage"].mean()) for rows in sides)
    profilers = tuple(str(rows["profiler"].iloc[0]) for rows in sides)
    said: dict[str, Any] = {
        "coverage": (coverage[0], coverage[1]),
        "effect": (effect[0], effect[1]),
        "profilers": (profilers[0], profilers[1]),
        "top": (_top(sides[0]), _top(sides[1])),
    }
    names = (comparison.baseline, comparison.agent)
    medians = (comparison.baseline_median_seconds, comparison.median_seconds)
    gap = medians[1] - medians[0]
    moved = sum(abs(1 - 1 / e) * m for e, m in zip(effect, medians, strict=True))
    said["distortion"] = moved / abs(gap)
    if said["distortion"] > MAX_DISTORTION:
        why = (
            f"profiling took {effect[0]:.2f}x and {effect[1]:.2f}x the timed steps: its own "
            f"time could move {said['distortion']:.0%} of the gap between classes (more than "
            f"{MAX_DISTORTION:.0%})"
        )
        return Attribution(comparison, not_attributed=why, **said)
    for name, covered in zip(names, coverage, strict=True):
        if covered < MIN_COVERAGE:
            why = f"the classes cover {covered:.0%} of {name}'s profiled step (under "
            why += f"{MIN_COVERAGE:.0%})"
            return Attribution(comparison, not_attributed=why, **said)
    shares = [class_shares(rows) for rows in sides]
    classes = []
    for op_class in dict.fromkeys([*shares[0], *shares[1]]):
        parts = [
            share.get(op_class, 0.0) * median for share, median in zip(shares, medians, strict=True)
        ]
        classes.append(ClassGap(op_class, parts[0], parts[1], (parts[1] - parts[0]) / gap))
    classes.sort(key=lambda c: -c.share_of_gap)
    return Attribution(comparison, tuple(classes), **said)


def profiled_rows(results: pd.DataFrame, contender: Contender) -> pd.DataFrame:
    """The contender's ok rows that carry a profile."""
    rows = results[results["cell"].isin(contender.cells)]
    if "profile_classes" not in rows:
        return rows.iloc[0:0]
    return rows[rows["profile_classes"].notna() & (rows["status"] == "ok")]


def _note(results: pd.DataFrame, contender: Contender | None) -> str:
    if contender is None or "profile_note" not in results:
        return " (run it with --profile STEPS)"
    column = results[results["cell"].isin(contender.cells)]["profile_note"].dropna()
    notes = [n for n in column if n]
    return f": {notes[0]}" if notes else " (run it with --profile STEPS)"


def class_shares(rows: pd.DataFrame) -> dict[str, float]:
    """Each class's mean share of the profiled step over the side's profiled processes."""
    total: dict[str, float] = {}
    for classes, step in zip(rows["profile_classes"], rows["profile_step_seconds"], strict=True):
        for name, seconds in json.loads(classes).items():
            total[name] = total.get(name, 0.0) + seconds / step / len(rows)
    scale = sum(total.values())  # 1 unless threads overlapped in the profile
    return {name: share / scale for name, share in total.items()}


def _top(rows: pd.DataFrame) -> tuple[Any, ...]:
    operations = json.loads(rows["profile_operations"].iloc[0])
    return tuple(operations[:TOP_OPERATIONS])
