"""Scrapes of an agent's /metrics and the window of a cell's timed phase over them: counters
interpolated at the window's edges and differenced, gauges read inside it (telemetry.py's
columns and cpu_load.py's interference are both made of these)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass
class Scrape:
    time: float  # unix seconds, midpoint of the HTTP request
    values: dict[tuple[str, str], float]


def interpolate(points: Sequence[tuple[float, float]], at: float) -> float:
    """Linear interpolation of a counter at time `at`, clamped to the first/last point."""
    times, values = zip(*points, strict=True)
    return float(np.interp(at, times, values))


class Window:
    """The scrapes of one cell seen over its timed phase [start, end] (unix seconds)."""

    def __init__(self, scrapes: Sequence[Scrape], start: float, end: float) -> None:
        self.scrapes = sorted(scrapes, key=lambda s: s.time)
        self.start, self.end = start, end
        inside = [s for s in self.scrapes if start <= s.time <= end]
        if not inside:  # a phase shorter than the interval: use the scrapes around it
            before = [s for s in self.scrapes if s.time < start][-1:]
            after = [s for s in self.scrapes if s.time > end][:1]
            inside = before + after
        self.inside = inside

    def points(self, key: tuple[str, str]) -> list[tuple[float, float]]:
        return [(s.time, s.values[key]) for s in self.scrapes if key in s.values]

    def delta(self, key: tuple[str, str]) -> float:
        points = self.points(key)
        if not points:
            return math.nan
        return interpolate(points, self.end) - interpolate(points, self.start)

    def gauge(self, key: tuple[str, str]) -> list[float]:
        return [s.values[key] for s in self.inside if key in s.values]

    def labels(self, metric: str) -> set[str]:
        return {label for s in self.scrapes for (name, label) in s.values if name == metric}

    def first_after_end(self, key: tuple[str, str]) -> float:
        later = [s.values[key] for s in self.scrapes if s.time >= self.end and key in s.values]
        return later[0] if later else math.nan


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def maximum(values: Sequence[float]) -> float:
    return max(values) if values else math.nan
