"""Adding another store's runs to this one (`collector results --merge`): a run measured
elsewhere (a Slurm job's collector, cli/slurm_export.py; another machine) joins the caller's
store whole, rows, samples and telemetry as stored, so every command reads it as its own.

Merging adds, never changes a measurement: a run the target lacks is copied; a run it holds
gains the cells it lacks (merged once while the job still ran, then again), and takes the
source's status and metadata; a cell both hold must be the same row, else nothing is merged
and the conflict is named. One transaction: all of it, or nothing."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwbench.collector.store.database import saving
from fwbench.collector.store.schema import SCHEMA_VERSION
from fwbench.collector.store.tables import StorageUnusable, connect_existing

STORE_NAME = "store.sqlite"  # a run folder's own store (an exported job's, cli/slurm_export.py)
CELL_TABLES = ("results", "samples", "telemetry")


class MergeRefused(ValueError):
    """Nothing was merged: the message says why (a run made by a newer collector, a cell
    that differs between the two stores)."""


@dataclass(frozen=True)
class Merged:
    """What one run of the source did to the target."""

    run_id: str
    status: str
    added: int  # cells added
    held: int  # cells the target held already, the same


def source_store(path: Path) -> Path:
    """The store file `path` names: the file itself, or a run folder's store.sqlite."""
    found = path / STORE_NAME if path.is_dir() else path
    if not found.is_file():
        where = f"{path} holds no {STORE_NAME}" if path.is_dir() else f"{path} does not exist"
        raise StorageUnusable(
            f"cannot merge: {where} (give a store, or the run folder of an exported job)"
        )
    return found


def merge_stores(target: Path, source: Path) -> list[Merged]:
    """Adds every run of the store at `source` to the store at `target` (which must exist:
    ResultStore makes it); raises MergeRefused, with nothing merged, on a conflict."""
    if source.resolve() == target.resolve():
        raise MergeRefused(f"{source} is the store merged into")
    reading = connect_existing(source, f"cannot read the store {source}")
    try:
        runs = reading.execute(
            "SELECT run_id, schema_version, started_at, finished_at, status, out_dir, "
            "metadata_json FROM runs ORDER BY started_at"
        ).fetchall()
        cells = {
            table: reading.execute(f"SELECT * FROM {table} ORDER BY run_id, cell").fetchall()
            for table in CELL_TABLES
            if _has(reading, table)
        }
    finally:
        reading.close()
    newer = [run[0] for run in runs if run[1] > SCHEMA_VERSION]
    if newer:
        raise MergeRefused(
            f"runs {', '.join(newer)} were stored by a newer collector (schema above "
            f"{SCHEMA_VERSION}): upgrade this one to merge them"
        )
    db = connect_existing(target, f"cannot use the results store {target}")
    try:
        with saving(str(target)):
            db.execute("BEGIN IMMEDIATE")
            try:
                done = [_merge_run(db, run, cells) for run in runs]
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
    finally:
        db.close()
    return done


def _has(db: sqlite3.Connection, table: str) -> bool:
    found = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,))
    return found.fetchone() is not None


def _merge_run(
    db: sqlite3.Connection, run: tuple[Any, ...], cells: dict[str, list[tuple[Any, ...]]]
) -> Merged:
    run_id = run[0]
    held = dict(db.execute("SELECT cell, row_json FROM results WHERE run_id = ?", (run_id,)))
    rows = {cell: text for rid, cell, text in cells["results"] if rid == run_id}
    differing = sorted(cell for cell, text in rows.items() if held.get(cell, text) != text)
    if differing:
        raise MergeRefused(
            f"run {run_id}: cells {', '.join(map(str, differing))} differ between the two stores "
            "(the same run id measured twice?); nothing was merged"
        )
    if set(held) - set(rows) and set(rows) - set(held):
        raise MergeRefused(
            f"run {run_id}: each store holds cells the other lacks (the same run id measured "
            "twice?); nothing was merged"
        )
    if set(held) > set(rows):  # the target's record is the fuller: it stays
        return Merged(run_id, "kept", 0, len(held))
    db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)", run)
    new = set(rows) - set(held)
    for table, found in cells.items():
        db.executemany(
            f"INSERT INTO {table} VALUES (?, ?, ?)",
            [one for one in found if one[0] == run_id and one[1] in new],
        )
    return Merged(run_id, run[4], len(new), len(held))
