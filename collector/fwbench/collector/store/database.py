"""The results store: every result is committed to an embedded SQLite database the moment it
arrives (the run folder, folder.py, is an export of it), so a crash or a kill loses nothing
already measured."""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fwbench.collector.store.schema import SCHEMA_VERSION, to_frame

STORE_VARIABLE = "FWBENCH_STORE"
_TABLES = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    schema_version INTEGER NOT NULL,
    started_at TEXT NOT NULL,
    finished_at TEXT,
    status TEXT NOT NULL,
    out_dir TEXT NOT NULL,
    metadata_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    cell INTEGER NOT NULL,
    row_json TEXT NOT NULL,
    PRIMARY KEY (run_id, cell)
);
CREATE TABLE IF NOT EXISTS samples (
    run_id TEXT NOT NULL,
    cell INTEGER NOT NULL,
    sample_nanoseconds BLOB NOT NULL,  -- little-endian int64 array
    PRIMARY KEY (run_id, cell)
);
CREATE TABLE IF NOT EXISTS telemetry (
    run_id TEXT NOT NULL,
    cell INTEGER NOT NULL,
    series_json TEXT NOT NULL,  -- {"time": [unix ns], "metric": [], "label": [], "value": []}
    PRIMARY KEY (run_id, cell)
);
"""
TELEMETRY_COLUMNS = ("cell", "time", "metric", "label", "value")


class PersistenceError(RuntimeError):
    """Results could not be saved (disk full, permissions); the message says where the data
    measured so far is."""


def default_store_path() -> Path:
    home = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share"))
    return Path(os.environ.get(STORE_VARIABLE, home / "fwbench" / "results.sqlite"))


def json_default(value: object) -> object:
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, np.integer | np.floating | np.bool_):
        return value.item()
    raise TypeError(f"cannot store {type(value).__name__}")


def _clean(row: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


@contextmanager
def saving(where: str) -> Iterator[None]:
    try:
        yield
    except (OSError, sqlite3.Error) as error:
        raise PersistenceError(f"cannot save results to {where}: {error}") from error


class ResultStore:
    """The embedded store of every run (SQLite, one file)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with saving(str(path)):
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.executescript(_TABLES)

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
        blob = np.asarray(samples_ns, dtype="<i8").tobytes()
        text = json.dumps(_clean(row), default=json_default)
        series = None
        if telemetry is not None and len(telemetry):
            series = json.dumps(
                {
                    "time": telemetry["time"].astype("int64").tolist(),
                    "metric": telemetry["metric"].astype(str).tolist(),
                    "label": telemetry["label"].astype(str).tolist(),
                    "value": telemetry["value"].astype(float).tolist(),
                }
            )
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
                self._db.execute("ROLLBACK")
                raise

    def finish_run(
        self, run_id: str, status: str, finished_at: str, metadata: Mapping[str, Any]
    ) -> None:
        with saving(str(self.path)):
            self._db.execute(
                "UPDATE runs SET status = ?, finished_at = ?, metadata_json = ? WHERE run_id = ?",
                (status, finished_at, json.dumps(metadata), run_id),
            )

    def runs(self) -> pd.DataFrame:
        query = """SELECT r.run_id, r.started_at, r.finished_at, r.status, r.out_dir,
                          COUNT(s.cell) AS cells
                   FROM runs r LEFT JOIN results s ON s.run_id = r.run_id
                   GROUP BY r.run_id ORDER BY r.started_at"""
        return pd.read_sql_query(query, self._db)

    def run_metadata(self, run_id: str) -> dict[str, Any] | None:
        found = self._db.execute(
            "SELECT metadata_json FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        return json.loads(found[0]) if found else None

    def results(self, run_id: str) -> pd.DataFrame:
        rows = self._db.execute(
            "SELECT row_json FROM results WHERE run_id = ? ORDER BY cell", (run_id,)
        ).fetchall()
        return to_frame(json.loads(text) for (text,) in rows)

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
        frames = [pd.DataFrame({"cell": cell, **json.loads(text)}) for cell, text in rows]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        frame = frame.reindex(columns=list(TELEMETRY_COLUMNS))
        frame["time"] = pd.to_datetime(frame["time"].astype("int64"), unit="ns", utc=True)
        return frame.astype(
            {"cell": "int64", "metric": "string", "label": "string", "value": "float64"}
        )

    def close(self) -> None:
        self._db.close()
