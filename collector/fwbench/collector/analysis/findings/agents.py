"""One agent far off the others in one cell when they agree elsewhere (off-other-agents)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from fwbench.collector.analysis.findings.cells import (
    Cell,
    Named,
    Sweep,
    mode_text,
    name_of,
    without,
)
from fwbench.collector.analysis.findings.model import (
    MIN_OTHER_CELLS,
    OFF_OTHERS,
    OFF_OTHERS_FACTOR,
    OTHERS_AGREE,
    Evidence,
    Finding,
)
from fwbench.collector.store.cell_key import CellKey


@dataclass(frozen=True)
class _Odd:
    """A pair of agents whose ratio in one cell is far off their ratio in the sweep's others."""

    place: tuple[Any, ...]  # (batch, threads)
    a: tuple[str, str]
    b: tuple[str, str]
    ratio: float  # a's time over b's in the cell
    usual: float  # the median of that ratio over the other cells
    others: int  # how many other cells

    @property
    def size(self) -> float:
        return max(self.ratio / self.usual, self.usual / self.ratio)


def _ratio(a: Cell, b: Cell) -> tuple[float, float, float]:
    return a.median / b.median, a.low / b.high, a.high / b.low


def _odd_pairs(sweep: Sweep) -> list[_Odd]:
    odd = []
    for a, b in combinations(sorted(sweep), 2):
        shared = sorted(set(sweep[a]) & set(sweep[b]))
        if len(shared) < MIN_OTHER_CELLS + 1:
            continue
        ratios = {place: _ratio(sweep[a][place], sweep[b][place]) for place in shared}
        for place in shared:
            rest = [ratios[p] for p in shared if p != place]
            points = [r[0] for r in rest]
            if max(points) > OTHERS_AGREE * min(points):
                continue
            point, low, high = ratios[place]
            lowest, highest = min(r[1] for r in rest), max(r[2] for r in rest)
            if low > OFF_OTHERS_FACTOR * highest or high * OFF_OTHERS_FACTOR < lowest:
                odd.append(_Odd(place, a, b, point, float(np.median(points)), len(rest)))
    return odd


def agent_findings(
    measured: list[Cell], shown: set[str], odd: Named
) -> tuple[list[Finding], Named]:
    """off-other-agents findings, and the cells they name as odd; a cell `odd` names already
    (off its own trend) gets none."""
    sweeps: dict[CellKey, Sweep] = {}
    for cell in measured:
        units = sweeps.setdefault(without(cell.key, "batch_size", "threads"), {})
        units.setdefault(cell.unit, {})[(cell.batch, cell.threads)] = cell
    found: list[Finding] = []
    named: Named = set()
    for _, sweep in sorted(sweeps.items(), key=lambda item: json.dumps(item[0], default=str)):
        by_place: dict[tuple[Any, ...], list[_Odd]] = {}
        for pair in _odd_pairs(sweep):
            by_place.setdefault(pair.place, []).append(pair)
        for place, pairs in sorted(by_place.items()):
            common = set.intersection(*({p.a, p.b} for p in pairs))
            # Against several agents, the one in every odd pair is the odd one; one pair
            # alone does not say which of its two is.
            if len(pairs) > 1 and len(common) == 1:
                unit = common.pop()
                if name_of(sweep[unit][place]) not in odd:
                    found.append(_one_off(sweep, place, pairs, unit, shown))
                    named.add(name_of(sweep[unit][place]))
                continue
            for pair in pairs:
                cells = [name_of(sweep[pair.a][place]), name_of(sweep[pair.b][place])]
                if not odd.intersection(cells):
                    found.append(_pair_off(sweep, pair, shown))
                    named.update(cells)
    return found, named


def _unit_name(sweep: Sweep, unit: tuple[str, str]) -> str:
    """The agent, and its mode where it ran several."""
    return unit[0] + mode_text(next(iter(sweep[unit].values())))


def _agents_evidence(
    sweep: Sweep, units: Sequence[tuple[str, str]], shown: set[str]
) -> tuple[Evidence, ...]:
    chosen = sorted(set(units))
    places = sorted(set.intersection(*(set(sweep[u]) for u in chosen)))
    return tuple(sweep[u][p].evidence(_unit_name(sweep, u), shown) for p in places for u in chosen)


def _one_off(
    sweep: Sweep, place: tuple[Any, ...], pairs: list[_Odd], unit: tuple[str, str], shown: set[str]
) -> Finding:
    cell = sweep[unit][place]
    worst = max(pairs, key=lambda p: (p.size, p.b if p.a == unit else p.a))
    other = worst.b if worst.a == unit else worst.a
    ratio, usual = (
        (worst.ratio, worst.usual) if worst.a == unit else (1 / worst.ratio, 1 / worst.usual)
    )
    rest = sorted(_unit_name(sweep, p.b if p.a == unit else p.a) for p in pairs if p is not worst)
    label = cell.key.label(tuple(shown))
    return Finding(
        OFF_OTHERS,
        f"{_unit_name(sweep, unit)} {label}: far off the other agents in this cell alone, "
        f"{ratio:.2f}x {_unit_name(sweep, other)}'s time here against {usual:.2f}x in their other "
        f"{worst.others} cells ({worst.size:.1f}x off; likewise against {', '.join(rest)}); "
        f"look at {unit[0]} in this cell",
        _agents_evidence(sweep, [p.a for p in pairs] + [p.b for p in pairs], shown),
        worst.size,
    )


def _pair_off(sweep: Sweep, pair: _Odd, shown: set[str]) -> Finding:
    label = sweep[pair.a][pair.place].key.label(tuple(shown))
    a, b = _unit_name(sweep, pair.a), _unit_name(sweep, pair.b)
    return Finding(
        OFF_OTHERS,
        f"{a} and {b} {label}: they differ here as nowhere else in the sweep, {a} takes "
        f"{pair.ratio:.2f}x {b}'s time against {pair.usual:.2f}x in their other "
        f"{pair.others} cells ({pair.size:.1f}x off); one of them is far off in this cell "
        "(a third agent would tell which)",
        _agents_evidence(sweep, [pair.a, pair.b], shown),
        pair.size,
    )
