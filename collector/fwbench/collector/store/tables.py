"""The store's own tables, and how a file is known to be an fwbench store: an SQLite database
holding `runs` and `results` (and `samples`, `telemetry` in every store since 0.3) with exactly
these columns, and no other table. Anything else (an empty file, another program's database,
garbage) is refused with one line, never reused as an empty store."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

TABLES = """
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
COLUMNS = {
    "runs": (
        "run_id",
        "schema_version",
        "started_at",
        "finished_at",
        "status",
        "out_dir",
        "metadata_json",
    ),
    "results": ("run_id", "cell", "row_json"),
    "samples": ("run_id", "cell", "sample_nanoseconds"),
    "telemetry": ("run_id", "cell", "series_json"),
}
REQUIRED = ("runs", "results")  # stores from before 0.3 lack the others; they are added


class StorageUnusable(ValueError):
    """The results store or the run folder cannot be used: not an fwbench store, damaged,
    unreadable, read-only, or without room. Found before anything starts, or while reading;
    the message names the path and what is wrong."""


def create_store(path: Path) -> None:
    """Makes a new store at `path` whole: its tables are made in a file of its own, linked into
    place once complete, so no store file is ever seen empty or half made (and two collectors
    making the same store at once leave one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    new = path.with_name(f".{path.name}.new-{os.getpid()}")
    try:
        db = sqlite3.connect(new, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(TABLES)
        finally:
            db.close()
        try:
            os.link(new, path)
        except FileExistsError:
            pass  # another collector made it first: that one is used
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(new, path)
    finally:
        for leftover in (new, Path(f"{new}-wal"), Path(f"{new}-shm")):
            leftover.unlink(missing_ok=True)


def connect_existing(path: Path, what: str) -> sqlite3.Connection:
    """Opens a store file that exists, never creating one, and checks that it is an fwbench
    store (check_tables); raises StorageUnusable with `what` (e.g. "cannot read the results
    store PATH") and the reason."""
    try:
        if path.stat().st_size == 0:
            raise StorageUnusable(
                f"{what}: it is empty (0 bytes), not an fwbench store; move it away (a new "
                "store is made where there is none) or give another --store"
            )
        # A store on a read-only file system (an archive) is read as it is: SQLite could not
        # make the files a WAL database is read through. A run is refused there before.
        frozen = not os.access(path.parent, os.W_OK)
        db = sqlite3.connect(
            f"{path.resolve().as_uri()}?{'mode=ro&immutable=1' if frozen else 'mode=rw'}",
            uri=True,
            isolation_level=None,
            check_same_thread=False,
        )
    except (OSError, sqlite3.Error) as error:
        raise StorageUnusable(f"{what}: {error}") from error
    try:
        check_tables(db, what)
    except BaseException:
        db.close()
        raise
    return db


def check_tables(db: sqlite3.Connection, what: str) -> None:
    """Raises StorageUnusable unless the database's tables are the store's own."""
    try:
        names = [
            name
            for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not name.startswith("sqlite_")
        ]
        found = {
            name: [row[1] for row in db.execute(f'PRAGMA table_info("{name}")')]
            for name in names
            if name in COLUMNS
        }
    except sqlite3.Error as error:
        raise StorageUnusable(
            f"{what}: it is not a readable SQLite database (SQLite says: {error})"
        ) from error
    foreign = sorted(set(names) - set(COLUMNS))
    if not names:
        raise StorageUnusable(
            f"{what}: it is an SQLite database with no tables, not an fwbench store; move it "
            "away or give another --store"
        )
    if foreign or any(table not in names for table in REQUIRED):
        raise StorageUnusable(
            f"{what}: it is an SQLite database but not an fwbench store (its tables: "
            f"{', '.join(sorted(names))}); give another --store"
        )
    for table, columns in found.items():
        if tuple(columns) != COLUMNS[table]:
            raise StorageUnusable(
                f"{what}: its table {table} has columns {', '.join(columns)}, not an fwbench "
                f"store's ({', '.join(COLUMNS[table])})"
            )
