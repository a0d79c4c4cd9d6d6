"""A/A pairs (the same agent twice, agents/specs.py): how far apart one agent measured itself
in each cell, which is the noise floor compare.py applies."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fwbench.collector.agents.specs import aa_pairs
from fwbench.collector.analysis.contenders import Contender
from fwbench.collector.stats.significance import estimate_speedup, relative_difference
from fwbench.collector.store.cell_key import CellKey


@dataclass(frozen=True)
class NoiseMeasurement:
    """An A/A pair in one cell: how far apart the same agent measured itself."""

    key: CellKey
    agent: str
    other: str
    mode: str
    speedup: float
    ci_low: float
    ci_high: float

    @property
    def difference(self) -> float:
        return relative_difference(self.speedup)


def noise_measurements(cells: Iterable[Contender]) -> list[NoiseMeasurement]:
    """Every A/A pair's speedup in every cell (and mode) both instances measured clean (an
    interfered side measures the other processes, not the noise)."""
    by_id = {(c.agent, c.mode, c.key): c for c in cells if c.clean}
    found = []
    for first, other in aa_pairs(agent for agent, _, _ in by_id):
        for (agent, mode, key), cell in by_id.items():
            twin = by_id.get((other, mode, key))
            if agent != first or twin is None:
                continue
            estimate = estimate_speedup(cell.groups, twin.groups)
            found.append(
                NoiseMeasurement(
                    key, first, other, mode, estimate.speedup, estimate.ci_low, estimate.ci_high
                )
            )
    return found
