"""Scaling efficiency with its interval and a verdict, by the rules every comparison follows
(stats/significance.py).

Efficiency(N) = items/s of N replicas / (N x items/s of one replica). Items/s is items per
step over the step time, so efficiency = c x t1 / tN, where t1 and tN are the step times of
the 1-replica and the N-replica worlds and c = items per step of N / (N x items per step of
one), fixed by the cell (1 for data parallelism, 1 / N for a pipeline, whose batch is the
world's). Dividing the N-replica world's samples by c makes efficiency a speedup of them over
the 1-replica world's, so its interval, p-value and verdict come from estimate_speedup as any
comparison's do: Welch's t over the repetitions' medians with two or more repetitions (fresh
processes, `--repeat`) a side; otherwise the interval describes those processes only and the
verdict is undecided, since how much two processes of one world differ is unknown.

Verdicts, against perfect scaling (efficiency 1) with the comparisons' noise floor and
equivalence margin, p-values Holm-adjusted over every efficiency shown together:
"linear" (within the margin), "sub-linear" (below), "super-linear" (above), "undecided"."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from fwbench.collector.agents.specs import Instance
from fwbench.collector.analysis.contenders import samples_by_cell
from fwbench.collector.stats.bootstrap import FloatArray
from fwbench.collector.stats.significance import (
    DEFAULT_MARGIN,
    DEFAULT_NOISE_FLOOR,
    EQUIVALENT,
    FASTER,
    PROCESSES,
    SLOWER,
    UNDECIDED,
    RatioEstimate,
    equivalence_p,
    estimate_speedup,
    holm,
    verdict,
)

LINEAR, SUB_LINEAR, SUPER_LINEAR = "linear", "sub-linear", "super-linear"
SCALING_VERDICTS = {EQUIVALENT: LINEAR, SLOWER: SUB_LINEAR, FASTER: SUPER_LINEAR}
ONE_PROCESS_NOTE = "one process a side: --repeat 3 (or more) decides"


def agent_family(agent: str) -> str:
    """The agent a world instance runs, A/A suffix kept: torch-cpu~w2#2 -> torch-cpu#2."""
    found = Instance.parse(agent)
    return str(Instance(found.agent, copy=found.copy))


def world_shapes(results: pd.DataFrame) -> dict[int, dict[str, Any]]:
    """{cell: what scaling_factor reads of its (first) row} for a run's results; {} for a run
    without worlds. Read once: compare asks for every pair of cells, and a row taken from a
    results table (a hundred columns, most of them nullable) costs milliseconds each time."""
    if "world_size" not in results:
        return {}
    read = ("agent", "world_size", "local_devices", "items_per_sample")
    columns = [c for c in read if c in results]
    first = results.drop_duplicates("cell")
    rows = first[columns].itertuples(index=False, name=None)
    return {
        int(cell): dict(zip(columns, row, strict=True))
        for cell, row in zip(first["cell"], rows, strict=True)
    }


def scaling_factor(
    shapes: Mapping[int, Mapping[str, Any]], base_cell: int, cell: int
) -> float | None:
    """c of efficiency = c x t_base / t for two cells (processes) of a run (`shapes`: its
    world_shapes) when they are one agent's worlds of different shapes: (items per step per
    replica of `cell`) / (that of `base_cell`); None for any other pair (other agents, not
    worlds, the same shape)."""
    if base_cell not in shapes or cell not in shapes:
        return None
    base, other = shapes[base_cell], shapes[cell]
    if agent_family(str(base["agent"])) != agent_family(str(other["agent"])):
        return None
    replicas = []
    for row in (base, other):
        ranks, devices = row.get("world_size"), row.get("local_devices")
        if pd.isna(ranks) or pd.isna(row.get("items_per_sample")):
            return None
        replicas.append(int(ranks) * (1 if pd.isna(devices) else int(devices)))
    if replicas[0] == replicas[1]:
        return None
    base_items = float(base["items_per_sample"]) / replicas[0]
    return float(other["items_per_sample"]) / replicas[1] / base_items


def one_replica_world(results: pd.DataFrame) -> str | None:
    """For a run of one agent's worlds (--world-sizes), the name of its world of one replica,
    the baseline its other worlds scale from; None for any other run."""
    if "world_size" not in results or results["world_size"].isna().any():
        return None
    if results["agent"].map(agent_family).nunique() != 1:
        return None
    devices = pd.to_numeric(results.get("local_devices", pd.Series(1, results.index)))
    single = results[results["world_size"] * devices.fillna(1) == 1]
    return str(single["agent"].iloc[0]) if not single.empty else None


@dataclass(frozen=True)
class Efficiency:
    """One world's efficiency against its 1-replica world."""

    estimate: RatioEstimate  # speedup = efficiency, with its 95% interval and p
    repetitions: int  # processes of the N-replica world
    baseline_repetitions: int  # of the 1-replica world
    p_adjusted: float = math.nan
    verdict: str = UNDECIDED

    @property
    def accounted(self) -> bool:
        return self.estimate.method == PROCESSES

    def record(self) -> dict[str, Any]:
        return {
            "scaling_efficiency": self.estimate.speedup,
            "efficiency_ci_low": self.estimate.ci_low,
            "efficiency_ci_high": self.estimate.ci_high,
            "efficiency_p_holm": self.p_adjusted,
            "efficiency_repetitions": f"{self.repetitions}/{self.baseline_repetitions}",
            "scaling_verdict": self.verdict,
        }


def efficiencies(
    rows: pd.DataFrame, samples: pd.DataFrame, same: list[str]
) -> dict[int, Efficiency]:
    """Per row index of `rows` (ok world rows with `ranks`, `devices`, `replicas`,
    `items_per_sample`, `cell` and the columns of `same`, which name an agent family and a
    cell), the efficiency of its world's processes against the 1-replica processes of the
    same `same`. Rows without a 1-replica world, collectives and the 1-replica rows
    themselves get none. The verdicts are adjusted together."""
    by_cell = samples_by_cell(samples)
    sides: dict[int, tuple[list[FloatArray], list[FloatArray]]] = {}
    for _, part in rows.groupby(same, dropna=False, sort=False):
        single = part[part["replicas"] == 1]
        base = _groups(single, by_cell, 1.0)
        if not base or (part["strategy"] == "collective").any():
            continue
        items_alone = float(single["items_per_sample"].median())
        for _, world in part[part["replicas"] > 1].groupby(["ranks", "devices"]):
            replicas = int(world["replicas"].iloc[0])
            factor = float(world["items_per_sample"].median()) / (replicas * items_alone)
            other = _groups(world, by_cell, factor)
            if other:
                for index in world.index:
                    sides[int(index)] = (base, other)
    return _decided(sides)


def _groups(
    rows: pd.DataFrame, by_cell: Mapping[int, FloatArray], factor: float
) -> list[FloatArray]:
    """The samples of each of `rows`' processes (cells), divided by `factor`."""
    groups = [by_cell.get(int(cell)) for cell in rows["cell"]]
    return [group / factor for group in groups if group is not None and group.size]


def _decided(sides: dict[int, tuple[list[FloatArray], list[FloatArray]]]) -> dict[int, Efficiency]:
    """Each world's estimate; then Holm over those whose processes account for their
    variation (the others are never called, so not counted), and each one's verdict."""
    estimates = {index: estimate_speedup(*pair) for index, pair in sides.items()}
    worlds = {id(pair[1]): index for index, pair in sides.items()}  # one test per world
    tested = [index for index in worlds.values() if estimates[index].method == PROCESSES]
    adjusted = dict(zip(tested, holm([estimates[i].p_value for i in tested]), strict=True))
    bound = 1 + max(DEFAULT_MARGIN, DEFAULT_NOISE_FLOOR)
    equivalent = holm([equivalence_p(*sides[index], bound) for index in tested])
    tost = dict(zip(tested, equivalent, strict=True))
    found = {}
    for index, (base, other) in sides.items():
        first = worlds[id(other)]
        estimate, said, p_value = estimates[index], UNDECIDED, math.nan
        if first in adjusted:
            p_value = adjusted[first]
            said = verdict(
                estimate,
                p_value,
                DEFAULT_NOISE_FLOOR,
                DEFAULT_MARGIN,
                p_equivalent_adjusted=tost[first],
            )
        found[index] = Efficiency(
            estimate, len(other), len(base), p_value, SCALING_VERDICTS.get(said, UNDECIDED)
        )
    return found


def efficiency_text(row: Mapping[Hashable, Any]) -> str:
    """ "85% [78%, 93%]" (with an interval where the row has one), "85%", or "-"."""
    value = row.get("scaling_efficiency")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    low, high = row.get("efficiency_ci_low"), row.get("efficiency_ci_high")
    if low is None or high is None or not np.isfinite([low, high]).all():
        return f"{value:.0%}"
    return percent_interval(value, low, high)


def percent_interval(value: float, low: float, high: float) -> str:
    """ "34% [31%, 37%]"; with a decimal where whole percents would hide the interval."""
    places = 1 if high - low < 0.02 else 0
    return f"{value:.{places}%} [{low:.{places}%}, {high:.{places}%}]"
