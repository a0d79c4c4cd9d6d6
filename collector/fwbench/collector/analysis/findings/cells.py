"""What the scaling and agents' rules read: each agent's cells in each mode, its ok rows
that ran as asked and were not interfered, repetitions pooled (the package's docstring)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fwbench.collector.analysis.contenders import RunData, samples_by_cell
from fwbench.collector.analysis.findings.model import BACKWARDS_MIN, Evidence
from fwbench.collector.store.cell_key import CellKey, clean


@dataclass(frozen=True)
class Cell:
    """One agent's cell in one mode as the rules read it: its trusted ok rows pooled."""

    agent: str
    mode: str
    key: CellKey
    cells: tuple[int, ...]
    median: float
    low: float
    high: float
    items: float
    cores: int | None  # usable_cores: more threads than this oversubscribe
    many_modes: bool = False  # whether its agent ran several modes: then names say which

    @property
    def unit(self) -> tuple[str, str]:
        return self.agent, self.mode

    @property
    def batch(self) -> int:
        return int(self.key.batch_size)

    @property
    def threads(self) -> int:
        return int(self.key.threads or 0)

    def per_item(self) -> tuple[float, float, float]:
        return self.median / self.items, self.low / self.items, self.high / self.items

    def evidence(self, tag: str, shown: Iterable[str], note: str = "") -> Evidence:
        label = self.key.label(tuple(shown))
        return Evidence(
            tag,
            self.agent,
            self.mode,
            label,
            self.cells,
            self.median,
            self.low,
            self.high,
            self.items,
            note,
        )


def number(value: Any) -> float:
    value = clean(value)
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def ok_rows(run: RunData) -> list[dict[str, Any]]:
    results = run.results
    if results.empty or "status" not in results:
        return []
    ok = results[results["status"] == "ok"].sort_values("cell")
    return [{str(k): v for k, v in row.items()} for row in ok.to_dict("records")]


def _distrusted(row: Mapping[str, Any]) -> bool:
    """A row the tool already does not take at its word: interfered, or not as asked."""
    return clean(row.get("interfered")) is True or bool(clean(row.get("settings_mismatch")))


def _pooled(rows: Sequence[Mapping[str, Any]], by_cell: Mapping[int, np.ndarray]) -> Cell | None:
    """The repetitions of one agent's cell pooled (the package's docstring); None where a row
    has no positive median to pool."""
    first = rows[0]
    medians = [number(r.get("median_seconds")) for r in rows]
    # A row stored without its interval (runs before it existed) stands as a point.
    lows = [number(r.get("median_ci_low_seconds")) for r in rows]
    highs = [number(r.get("median_ci_high_seconds")) for r in rows]
    lows = [m if math.isnan(v) else v for v, m in zip(lows, medians, strict=True)]
    highs = [m if math.isnan(v) else v for v, m in zip(highs, medians, strict=True)]
    if not all(m > 0 for m in medians) or not min(lows) > 0:
        return None
    cells = tuple(int(r["cell"]) for r in rows)
    if len(rows) == 1:
        median = medians[0]
    elif all(by_cell.get(c) is not None and by_cell[c].size for c in cells):
        median = float(np.median(np.concatenate([by_cell[c] for c in cells])))
    else:
        median = float(np.median(medians))
    items = number(first.get("items_per_sample"))
    if not items > 0:
        items = float(first["batch_size"])  # runs before items_per_sample existed
    cores = clean(first.get("usable_cores"))
    return Cell(
        str(first["agent"]),
        clean(first.get("mode")) or "",
        CellKey.of_row(first),
        cells,
        median,
        min(lows),
        max(highs),
        items,
        int(cores) if cores else None,
    )


def measured_cells(run: RunData, rows: Sequence[dict[str, Any]]) -> list[Cell]:
    """Every agent's cell in each mode from its trusted ok rows, in execution order."""
    grouped: dict[tuple[str, str, CellKey], list[dict[str, Any]]] = {}
    for row in rows:
        if _distrusted(row) or clean(row.get("batch_size")) is None:
            continue
        side = (str(row["agent"]), clean(row.get("mode")) or "", CellKey.of_row(row))
        grouped.setdefault(side, []).append(row)
    needed = any(len(group) > 1 for group in grouped.values())
    by_cell = samples_by_cell(run.samples) if needed and not run.samples.empty else {}
    pooled = (_pooled(group, by_cell) for group in grouped.values())
    found = [cell for cell in pooled if cell is not None]
    modes: dict[str, set[str]] = {}
    for cell in found:
        modes.setdefault(cell.agent, set()).add(cell.mode)
    return [replace(cell, many_modes=len(modes[cell.agent]) > 1) for cell in found]


def without(key: CellKey, *fields: str) -> CellKey:
    """`key` with `fields` None: the cells of a sweep over them share it."""
    return CellKey._make(None if name in fields else value for name, value in key._asdict().items())


def sweep_label(key: CellKey, shown: Iterable[str], drop: str) -> str:
    """The cell's name without the swept part: "bs" (batch size) or "t" (threads)."""
    value = key.batch_size if drop == "bs" else key.threads
    return re.sub(rf" {drop}={value}(?= |$)", "", key.label(tuple(shown)), count=1)


def apart(higher: tuple[float, float, float], lower: tuple[float, float, float]) -> bool:
    """Whether `higher` lies above `lower` beyond both intervals, by at least BACKWARDS_MIN."""
    return higher[1] > lower[2] and higher[0] >= (1 + BACKWARDS_MIN) * lower[0]


Sweep = dict[tuple[str, str], dict[tuple[Any, ...], Cell]]  # (agent, mode) -> place -> cell


Named = set[tuple[str, str, CellKey]]  # cells a finding names as the odd one: (agent, mode, key)


def name_of(cell: Cell) -> tuple[str, str, CellKey]:
    return cell.agent, cell.mode, cell.key


def mode_text(cell: Cell) -> str:
    """The mode, where its agent ran several (a name says which)."""
    return f" ({cell.mode})" if cell.mode and cell.many_modes else ""
