"""Persisting a run as it goes: each cell committed to the store (the durable record), then the
run folder refreshed; the run's end recorded in both; the agents' logs moved into the folder."""

from __future__ import annotations

import sqlite3
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fwbench.collector.agents.scratch import move_logs
from fwbench.collector.calibration.cache import remember_observed
from fwbench.collector.run.metadata import now
from fwbench.collector.run.normalize import RunCeilings
from fwbench.collector.store.database import PersistenceError, ResultStore
from fwbench.collector.store.folder import RunFolder
from fwbench.collector.store.tables import StorageUnusable

# The run folder's raw tables (samples, telemetry) are rewritten at most this often during a
# run, and at its end: rewriting them after every cell costs time that grows with the run.
RAW_TABLES_INTERVAL_SECONDS = 60.0


class Recorder:
    """Commits each cell to the store (`collector results RUN --export`), then refreshes the
    run folder: results after every cell, raw tables at most every RAW_TABLES_INTERVAL_SECONDS
    (and always at the end of the run, sync()). A row that raised a ceiling (RunCeilings)
    has every row of the run given its ceiling columns again, the raised calibration written
    into the run's metadata and this host's cached calibration. `statuses` counts the rows
    committed (a resumed run's kept rows first), whatever the folder's write did after."""

    def __init__(
        self,
        run_id: str,
        store: ResultStore,
        folder: RunFolder,
        ceilings: RunCeilings | None = None,
        metadata: dict[str, Any] | None = None,
        statuses: dict[str, int] | None = None,
    ) -> None:
        self.run_id, self.store, self.folder = run_id, store, folder
        self.statuses: dict[str, int] = dict(statuses or {})
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
        try:
            self.store.add_result(self.run_id, row, samples_ns, telemetry)
        except PersistenceError as error:
            kept = self._keep_unsaved(row, samples_ns, telemetry, str(error))
            raise PersistenceError(f"{error}; {kept}") from error
        self.statuses[row["status"]] = self.statuses.get(row["status"], 0) + 1
        if raised:
            self._ceiling_raised()
        self.folder.write_results(self.store.results(self.run_id))
        if time.monotonic() - self.raw_written >= RAW_TABLES_INTERVAL_SECONDS:
            run_id = self.run_id
            self.folder.write_raw(self.store.samples(run_id), self.store.telemetry(run_id))
            self.raw_written = time.monotonic()

    def _keep_unsaved(
        self,
        row: dict[str, Any],
        samples_ns: Sequence[int],
        telemetry: pd.DataFrame | None,
        why: str,
    ) -> str:
        """Writes a measured cell the store could not save into the run folder (given its
        reserve first: the same disk may be full); says where, or what is lost."""
        self.folder.release()
        cell, status = row["cell"], row["status"]
        try:
            path = self.folder.write_unsaved(row, samples_ns, telemetry, why)
        except PersistenceError as failed:
            median = row.get("median_seconds")
            return (
                f"cell {cell} ({status}, median {median} s, {len(samples_ns)} samples) could "
                f"not be written to the run folder either: {failed}"
            )
        return (
            f"cell {cell} ({status}, {len(samples_ns)} samples) was measured: its row, samples "
            f"and telemetry are written to {path} instead"
        )

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

    def recorded_statuses(self) -> dict[str, int]:
        """How many of the run's rows the store holds, by status: the one record run.json's
        counts and the folder's tables (sync) are taken from; the count of commits only when
        the store cannot be read (said on stderr)."""
        try:
            rows = self.store.rows(self.run_id)
        except (sqlite3.Error, StorageUnusable) as error:
            print(
                f"warning: run.json's statuses are this collector's count of the rows it "
                f"committed: the store could not be read back ({error})",
                file=sys.stderr,
            )
            return dict(self.statuses)
        return dict(sorted(Counter(str(row["status"]) for row in rows).items()))

    def sync(self) -> None:
        """Rewrites every table of the folder from the store (an interrupt can land between a
        row's commit and the folder's rewrite)."""
        run_id, store = self.run_id, self.store
        self.folder.write_tables(
            store.results(run_id), store.samples(run_id), store.telemetry(run_id)
        )


def run_status(statuses: dict[str, int], planned: int, interrupted: bool, escaped: str) -> str:
    """What a run's status says, in the store, run.json and the exit code: `ok` only when every
    planned cell was recorded ok or unsupported by its agent."""
    if interrupted:
        return "interrupted"
    if escaped or statuses.get("failed", 0) or statuses.get("cancelled", 0):
        return "failed"
    return "incomplete" if sum(statuses.values()) < planned else "ok"


def finish_run(
    recorder: Recorder,
    metadata: dict[str, Any],
    planned: int,
    interrupted: bool,
    escaped: str,
) -> None:
    """Records the run's end in the store, then in run.json, then the folder's tables, each as
    far as it can, with the folder's reserve given back first (folder.py: room on a disk that
    filled). A write that fails here is reported on stderr, never in place of the error that
    ended the run. The counts of statuses are what the store holds (recorded_statuses), never a
    tally a failed write could leave short. A store that cannot record the end leaves the run
    `running`, which `collector results` shows as interrupted once this collector is gone, and
    `--resume` finishes; a run.json that cannot be written is named, the store's record
    standing."""
    store, folder = recorder.store, recorder.folder
    statuses = recorder.recorded_statuses()
    status = run_status(statuses, planned, interrupted, escaped)
    metadata.update(finished_at=now(), statuses=dict(statuses), status=status)
    if escaped:
        metadata["error"] = escaped
    if metadata.get("resumed"):  # this resume ended (one killed has no finished_at)
        metadata["resumed"][-1].update(finished_at=metadata["finished_at"], status=status)
    folder.release()
    run_json = folder.path / "run.json"
    stale = f"; {run_json} may still say `running`: `collector results` has the run's state"
    run_id, finished = metadata["run_id"], metadata["finished_at"]
    writes: list[tuple[str, Callable[[], None]]] = [
        ("", lambda: store.finish_run(run_id, status, finished, metadata)),
        (stale, lambda: folder.write_metadata(metadata)),
        ("", recorder.sync),
    ]
    for said, write in writes:
        try:
            write()
        except PersistenceError as error:
            print(
                f"warning: the end of the run could not be recorded: {error}{said}",
                file=sys.stderr,
            )
    store.close()


def keep_logs(
    log_dir: Path, out_dir: Path, label: str = "", said: Callable[[Path], None] | None = None
) -> None:
    """Moves the agents' logs into the run folder's logs/ (names: agents/scratch.py), each
    moved one `said`; one that cannot be moved (a full disk) is left for the next command."""
    try:
        for log in move_logs(log_dir, out_dir / "logs", label):
            if said is not None:
                said(log)
    except OSError as error:
        print(
            f"warning: agent logs left in {log_dir} ({error}); the next collector command "
            f"moves them into {out_dir / 'logs'}",
            file=sys.stderr,
        )
