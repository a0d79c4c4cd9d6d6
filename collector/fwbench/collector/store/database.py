"""The results store: every result is committed to an embedded SQLite database the moment it
arrives (the run folder, folder.py, is an export of it), so a crash or a kill loses nothing
already measured."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fwbench.collector.places import data_path
from fwbench.collector.store.encoding import clean, json_default, telemetry_series
from fwbench.collector.store.owner import ResumeRefused, collector_gone, owner_text
from fwbench.collector.store.schema import SCHEMA_VERSION, to_frame
from fwbench.collector.store.tables import (
    TABLES,
    StorageUnusable,
    connect_existing,
    create_store,
)
from fwbench.spec import settings

STORE_VARIABLE = settings.STORE
TELEMETRY_COLUMNS = ("cell", "time", "metric", "label", "value")
MISSING = (
    "there is no such file (is --store or $FWBENCH_STORE mistyped?); `collector run` makes a "
    "store where none is"
)


class PersistenceError(RuntimeError):
    """Results could not be saved (disk full, permissions); the message says where the data
    measured so far is."""


def default_store_path() -> Path:
    return Path(os.environ.get(STORE_VARIABLE, data_path("results.sqlite")))


@contextmanager
def saving(where: str) -> Iterator[None]:
    try:
        yield
    except (OSError, sqlite3.Error) as error:
        raise PersistenceError(f"cannot save results to {where}: {error}") from error


class ResultStore:
    """The embedded store of every run (SQLite, one file)."""

    def __init__(self, path: Path, create: bool = True) -> None:
        """Opens the store at `path`: to write (`create`), made whole when missing; else to
        read only, nothing made: a missing store raises StorageUnusable naming the path (a
        mistyped --store must not read as a store without runs), as does a file that is not
        an fwbench store (empty, another database, damaged) either way."""
        self.path = path
        what = f"cannot {'use' if create else 'read'} the results store {path}"
        with saving(str(path)):
            if create and not path.exists():
                create_store(path)
        if not create and not path.exists():
            raise StorageUnusable(f"{what}: {MISSING}")
        self._db = connect_existing(path, what)
        if create:
            with saving(str(path)):
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.executescript(TABLES)  # a store from before 0.3 gains its tables

    def _json(self, text: str) -> Any:
        """A stored JSON text; one that does not parse is a damaged store (StorageUnusable)."""
        try:
            return json.loads(text)
        except (ValueError, TypeError) as error:
            raise StorageUnusable(
                f"cannot read the results store {self.path}: a stored record is not JSON "
                f"({error}); the file is damaged"
            ) from error

    def start_run(
        self, run_id: str, out_dir: Path, started_at: str, metadata: Mapping[str, Any]
    ) -> None:
        with saving(str(self.path)):
            self._db.execute(
                "INSERT INTO runs VALUES (?, ?, ?, NULL, 'running', ?, ?)",
                (run_id, SCHEMA_VERSION, started_at, str(out_dir), json.dumps(metadata)),
            )

    def add_result(
        self,
        run_id: str,
        row: Mapping[str, Any],
        samples_ns: Sequence[int],
        telemetry: pd.DataFrame | None = None,
    ) -> None:
        """Commits one row, its raw samples and its raw telemetry series (time, metric, label,
        value) in one transaction."""
        self.add_encoded(run_id, row, samples_ns, telemetry_series(telemetry))

    def add_encoded(
        self,
        run_id: str,
        row: Mapping[str, Any],
        samples_ns: Sequence[int],
        found: Mapping[str, list[Any]] | None,
    ) -> None:
        """add_result with the telemetry already as stored (telemetry_series): a cell read back
        from a run folder's unsaved/."""
        blob = np.asarray(samples_ns, dtype="<i8").tobytes()
        text = json.dumps(clean(row), default=json_default)
        series = None if found is None else json.dumps(found)
        with saving(str(self.path)):
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    "INSERT INTO results VALUES (?, ?, ?)", (run_id, row["cell"], text)
                )
                self._db.execute(
                    "INSERT INTO samples VALUES (?, ?, ?)", (run_id, row["cell"], blob)
                )
                if series is not None:
                    self._db.execute(
                        "INSERT INTO telemetry VALUES (?, ?, ?)", (run_id, row["cell"], series)
                    )
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction: committed whole, or rolled back."""
        with saving(str(self.path)):
            self._db.execute("BEGIN")
            try:
                yield
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise

    def _rollback(self) -> None:
        """Undoes an open transaction. SQLite may already have rolled it back itself (it does
        on SQLITE_FULL): then there is nothing to undo, and a ROLLBACK would raise "no
        transaction is active" in place of the real cause."""
        if self._db.in_transaction:  # the error that made us roll back is the one to report
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def finish_run(
        self, run_id: str, status: str, finished_at: str, metadata: Mapping[str, Any]
    ) -> None:
        with saving(str(self.path)):
            self._db.execute(
                "UPDATE runs SET status = ?, finished_at = ?, metadata_json = ? WHERE run_id = ?",
                (status, finished_at, json.dumps(metadata), run_id),
            )

    def claim_run(
        self, run_id: str, owner: Mapping[str, Any], resumed: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Takes over a run to resume it: refuses (ResumeRefused) a run that is unknown or
        still measured by a live collector; otherwise marks it `running` under `owner`, adds
        `resumed` to its metadata's `resumed` list (kept should this resume be killed too) and
        returns its metadata. Check and update happen in one write transaction, so two
        collectors cannot both claim it."""
        with saving(str(self.path)):
            self._db.execute("BEGIN IMMEDIATE")
            try:
                found = self._db.execute(
                    "SELECT status, metadata_json FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                if found is None:
                    raise ResumeRefused(
                        f"no run {run_id!r} in {self.path}; `collector results` lists the runs"
                    )
                metadata = self._json(found[1])
                if found[0] == "running" and not collector_gone(metadata.get("collector")):
                    raise ResumeRefused(f"run {run_id} is {owner_text(metadata)}")
                for stale in ("finished_at", "error", "statuses"):
                    metadata.pop(stale, None)
                metadata.update(collector=dict(owner), status="running")
                if resumed is not None:
                    metadata.setdefault("resumed", []).append(dict(resumed))
                self._db.execute(
                    "UPDATE runs SET status = 'running', finished_at = NULL, metadata_json = ? "
                    "WHERE run_id = ?",
                    (json.dumps(metadata), run_id),
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        return dict(metadata)

    def forget_cells(self, run_id: str, cells: Sequence[int]) -> None:
        """Deletes the rows of `cells` (cells a resumed run measures again: those cancelled by
        an interrupt, which hold no measurement), with their samples and telemetry."""
        with self._transaction():
            for table in ("results", "samples", "telemetry"):
                self._db.executemany(
                    f"DELETE FROM {table} WHERE run_id = ? AND cell = ?",
                    [(run_id, cell) for cell in cells],
                )

    def runs(self) -> pd.DataFrame:
        """Every run, oldest first. A run still `running` whose collector is gone (killed,
        or the machine restarted) is shown as `interrupted`: `collector run --resume` finishes
        it."""
        query = """SELECT r.run_id, r.started_at, r.finished_at, r.status, r.out_dir,
                          COUNT(s.cell) AS cells, r.metadata_json
                   FROM runs r LEFT JOIN results s ON s.run_id = r.run_id
                   GROUP BY r.run_id ORDER BY r.started_at"""
        columns = ["run_id", "started_at", "finished_at", "status", "out_dir", "cells", "meta"]
        frame = pd.DataFrame(self._db.execute(query).fetchall(), columns=columns)
        owners = [self._json(text).get("collector") for text in frame["meta"]]
        frame["status"] = [
            "interrupted" if status == "running" and collector_gone(owner) else status
            for status, owner in zip(frame["status"], owners, strict=True)
        ]
        return frame.drop(columns="meta")

    def run_metadata(self, run_id: str) -> dict[str, Any] | None:
        found = self._db.execute(
            "SELECT metadata_json FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return self._json(found[0]) if found else None

    def metadata_by_run(self) -> dict[str, dict[str, Any]]:
        """Every run's metadata, by run id, oldest first, in one query."""
        found = self._db.execute(
            "SELECT run_id, metadata_json FROM runs ORDER BY started_at"
        ).fetchall()
        return {run_id: self._json(text) for run_id, text in found}

    def rows(self, run_id: str) -> list[dict[str, Any]]:
        """The run's rows as stored (JSON), by cell."""
        rows = self._db.execute(
            "SELECT row_json FROM results WHERE run_id = ? ORDER BY cell", (run_id,)
        ).fetchall()
        return [self._json(text) for (text,) in rows]

    def results(self, run_id: str) -> pd.DataFrame:
        return to_frame(self.rows(run_id))

    def revise(
        self, run_id: str, rows: Sequence[Mapping[str, Any]], metadata: Mapping[str, Any] | None
    ) -> None:
        """Rewrites rows of the run (by cell) and its metadata, in one transaction: derived
        columns recomputed (a raised ceiling, run/recording.py), never a measurement."""
        texts = [json.dumps(clean(row), default=json_default) for row in rows]
        with self._transaction():
            self._db.executemany(
                "UPDATE results SET row_json = ? WHERE run_id = ? AND cell = ?",
                [(text, run_id, row["cell"]) for text, row in zip(texts, rows, strict=True)],
            )
            if metadata is not None:
                self._db.execute(
                    "UPDATE runs SET metadata_json = ? WHERE run_id = ?",
                    (json.dumps(metadata), run_id),
                )

    def samples(self, run_id: str) -> pd.DataFrame:
        """Long format: one row per raw sample (cell, iteration, seconds)."""
        rows = self._db.execute(
            "SELECT cell, sample_nanoseconds FROM samples WHERE run_id = ? ORDER BY cell", (run_id,)
        ).fetchall()
        frames = [
            pd.DataFrame({"cell": cell, "iteration": np.arange(len(ns)), "seconds": ns / 1e9})
            for cell, blob in rows
            for ns in [np.frombuffer(blob, dtype="<i8")]
        ]
        if not frames:
            return pd.DataFrame({"cell": [], "iteration": [], "seconds": []})
        return pd.concat(frames, ignore_index=True)

    def telemetry(self, run_id: str) -> pd.DataFrame:
        """Long format: one row per scraped sample (cell, time UTC, metric, label, value)."""
        rows = self._db.execute(
            "SELECT cell, series_json FROM telemetry WHERE run_id = ? ORDER BY cell", (run_id,)
        ).fetchall()
        frames = [pd.DataFrame({"cell": cell, **self._json(text)}) for cell, text in rows]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        frame = frame.reindex(columns=list(TELEMETRY_COLUMNS))
        frame["time"] = pd.to_datetime(frame["time"].astype("int64"), unit="ns", utc=True)
        return frame.astype(
            {"cell": "int64", "metric": "string", "label": "string", "value": "float64"}
        )

    def close(self) -> None:
        self._db.close()
