"""Persisting a run as it goes: each cell committed to the store (the durable record), then the
run folder refreshed; the agents' logs copied into the folder at the end."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fwbench.collector.calibration.cache import remember_observed
from fwbench.collector.run.normalize import RunCeilings
from fwbench.collector.store.database import ResultStore
from fwbench.collector.store.folder import RunFolder

# The run folder's raw tables (samples, telemetry) are rewritten at most this often during a
# run, and at its end: rewriting them after every cell costs time that grows with the run.
RAW_TABLES_INTERVAL_SECONDS = 60.0


class Recorder:
    """Commits each cell to the store (`collector results RUN --export`), then refreshes the
    run folder: results after every cell, raw tables at most every RAW_TABLES_INTERVAL_SECONDS
    (and always at the end of the run, sync()). A row that raised a ceiling (RunCeilings)
    has every row of the run given its ceiling columns again, the raised calibration written
    into the run's metadata and this host's cached calibration."""

    def __init__(
        self,
        run_id: str,
        store: ResultStore,
        folder: RunFolder,
        ceilings: RunCeilings | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        self.run_id, self.store, self.folder = run_id, store, folder
        self.ceilings, self.metadata = ceilings, metadata
        self.raw_written = time.monotonic()

    def record(
        self, row: dict[str, Any], samples_ns: Sequence[int], telemetry: pd.DataFrame | None
    ) -> None:
        raised = False
        if self.ceilings is not None:
            row = self.ceilings.annotate(row)
            if self.ceilings.raised_by(row, self.run_id):
                row, raised = self.ceilings.annotate(row), True
        self.store.add_result(self.run_id, row, samples_ns, telemetry)
        if raised:
            self._ceiling_raised()
        self.folder.write_results(self.store.results(self.run_id))
        if time.monotonic() - self.raw_written >= RAW_TABLES_INTERVAL_SECONDS:
            run_id = self.run_id
            self.folder.write_raw(self.store.samples(run_id), self.store.telemetry(run_id))
            self.raw_written = time.monotonic()

    def _ceiling_raised(self) -> None:
        assert self.ceilings is not None and self.ceilings.calibration is not None
        calibration = self.ceilings.calibration
        rows = [self.ceilings.annotate(row) for row in self.store.rows(self.run_id)]
        if self.metadata is not None:
            self.metadata["calibration"] = calibration
        self.store.revise(self.run_id, rows, self.metadata)
        if self.metadata is not None:
            self.folder.write_metadata(self.metadata)
        try:
            remember_observed(calibration)
        except OSError as error:
            print(f"warning: the raised ceiling was not cached: {error}", file=sys.stderr)

    def sync(self) -> None:
        """Rewrites every table of the folder from the store (an interrupt can land between a
        row's commit and the folder's rewrite)."""
        run_id, store = self.run_id, self.store
        self.folder.write_tables(
            store.results(run_id), store.samples(run_id), store.telemetry(run_id)
        )


def keep_logs(log_dir: Path, out_dir: Path) -> None:
    target = out_dir / "logs"
    try:
        target.mkdir(exist_ok=True)
        for log in log_dir.glob("*.log"):
            shutil.copy2(log, target / log.name)
        shutil.rmtree(log_dir, ignore_errors=True)
    except OSError as error:
        print(f"warning: agent logs left in {log_dir}: {error}", file=sys.stderr)
