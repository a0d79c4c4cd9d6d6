"""What every cell of a run shares (RunContext): the run's id, catalogue and selection, where
rows go (a Recorder) and who is told (a Display), the timeouts, and the counts so far. One
cell's call (call.py) reads it as the run's loop (execute.py) does."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from fwbench.collector.run.interference import DEFAULT_THRESHOLD_PERCENT
from fwbench.collector.run.liveness import HANG_SECONDS
from fwbench.collector.run.model_prepared import PreparedModel
from fwbench.collector.run.plan import Cell, Selection
from fwbench.spec import Catalogue


class Recorder(Protocol):
    def record(
        self, row: dict[str, Any], samples_ns: Sequence[int], telemetry: pd.DataFrame | None
    ) -> None:
        """Persists one row, its raw samples and raw telemetry series; raises
        PersistenceError when it cannot."""


class Display(Protocol):
    def cell_started(self, agent: str, cell: Cell) -> None: ...
    def cell_progress(self, agent: str, stage: str, iterations: int) -> None: ...
    def cell_finished(self, agent: str, row: dict[str, Any]) -> None: ...
    def note(self, agent: str, text: str) -> None: ...


@dataclass
class RunContext:
    run_id: str
    catalogue: Catalogue
    selection: Selection
    recorder: Recorder
    display: Display
    cell_timeout_seconds: float | None
    # Seconds between /metrics scrapes during a cell; None = no scraping at all.
    scrape_interval_seconds: float | None = None
    # Seconds without a heartbeat before an agent counts as hung (liveness.py); None = never.
    hang_timeout_seconds: float | None = HANG_SECONDS
    # Planned cell numbers already recorded (a resumed run): not run again.
    skip: frozenset[int] = frozenset()
    # Measuring until decided (decide.py): the round whose repetition this is (each round a
    # fresh process of every agent), and who is told of each recorded cell.
    round: int = 0
    observe: Callable[[Cell, dict[str, Any], Sequence[int]], None] | None = None
    next_index: int = 0
    # Interference (interference.py): the share of the agent's CPUs others may use before a
    # row is interfered, and the most seconds to wait before each cell for a quiet host.
    interference_threshold: float = DEFAULT_THRESHOLD_PERCENT
    quiet_host_seconds: float = 0.0
    # --model: the user's model file, prepared (model_file.py); None: the catalogue only.
    model: PreparedModel | None = None
    # The run's folder: profiles write their traces into its profiles/ (profiles.py).
    run_folder: Path | None = None

    def model_of(self, cell: Cell) -> PreparedModel | None:
        """The prepared model when `cell` measures it."""
        return self.model if self.model and cell.workload == self.model.asked.workload else None
