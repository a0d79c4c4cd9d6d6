"""What each process's row in a cell tells `--until-decided` (decide.py): its samples, and
what keeps a process out of a verdict or qualifies one. Kept by side: (agent, mode, cell)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fwbench.collector.run.plan import Cell
from fwbench.collector.stats.failures import (
    DIFFERED_NOTE,
    FAILED,
    FAILED_NOTE,
    OTHERWISE_NOTE,
    failure_text,
)
from fwbench.collector.stats.margins import SpreadOf
from fwbench.collector.stats.significance import ProcessSpread
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.store.interference_columns import interference_unknown
from fwbench.collector.verdicts.arithmetic import arithmetic
from fwbench.collector.verdicts.kernel_time import kernel_share

Side = tuple[str, str, CellKey]


@dataclass
class Observations:
    """Every side's processes so far. `spread_of`: this host's earlier spreads (margins.py),
    looked up at a side's first ok row; `round_of`: the round being measured (from 0)."""

    round_of: Callable[[], int]
    spread_of: SpreadOf | None = None
    groups: dict[Side, list[np.ndarray]] = field(default_factory=dict)  # seconds, a process each
    ran: dict[Side, dict[str, str]] = field(default_factory=dict)  # its float32 arithmetic
    kernel: dict[Side, list[float]] = field(default_factory=dict)  # its processes' kernel shares
    spreads: dict[Side, ProcessSpread | None] = field(default_factory=dict)
    # Processes that cannot stand in a verdict (stats/failures.py): what happened, and why
    # that stops its comparisons.
    lost: dict[Side, list[tuple[str, str]]] = field(default_factory=dict)
    # Interfered processes, left out (measured again): why, each.
    spoiled: dict[Side, list[str]] = field(default_factory=dict)
    # Processes kept whose interference could not be judged (interference_columns.py).
    unknown: dict[Side, int] = field(default_factory=dict)

    def observe(self, cell: Cell, row: dict[str, Any], samples: Sequence[int]) -> None:
        side: Side = (cell.agent, cell.mode, cell.key)
        said, process = "", f"{cell.agent}'s process in round {self.round_of() + 1}"
        if row["status"] == FAILED:
            error = failure_text(row.get("error_code"), row.get("error"))
            said, why = f"{process} failed ({error})", FAILED_NOTE
        elif row["status"] == "ok" and row.get("settings_mismatch"):
            said = f"{process} ran otherwise than asked ({row['settings_mismatch']})"
            why = OTHERWISE_NOTE
        elif row["status"] == "ok" and row.get("outputs_match") is False:
            said = f"the outputs of {process} differ from the reference's"
            said += f" ({row.get('outputs_note')})"
            why = DIFFERED_NOTE
        if said:
            self.lost.setdefault(side, []).append((said, why))
        if row["status"] == "ok" and bool(row.get("interfered")):
            self.spoiled.setdefault(side, []).append(f"{process}: {row.get('interference')}")
            return  # measured again next round, as though it had not run
        if row["status"] == "ok" and len(samples):
            sample = np.asarray(samples, dtype=np.float64) / 1e9
            self.groups.setdefault(side, []).append(sample)
            self.unknown[side] = self.unknown.get(side, 0) + interference_unknown(row)
            self.ran.setdefault(side, arithmetic(row.get("settings")))
            if self.spread_of is not None and side not in self.spreads:
                self.spreads[side] = self.spread_of(row)
            share = kernel_share(row)
            if share is not None:
                self.kernel.setdefault(side, []).append(share)
