"""Before `collector run` starts any agent: the store and the run folder can take the run.
The store opens, passes SQLite's `PRAGMA quick_check`, holds the store's own tables
(tables.py) and takes a write; the run folder can be made and written; both file systems
have MIN_FREE_BYTES free. What fails is refused with one line naming the path and what is
wrong (StorageUnusable, exit 2); nothing is started and nothing is written (a store or folder
that does not exist yet is not made here)."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

from fwbench.collector.store.tables import StorageUnusable, connect_existing

# The least free space a run starts with on the store's and on the run folder's file system:
# a cell takes kilobytes (a row, its samples, its telemetry), the run folder's tables are
# rewritten whole after each cell, and the run folder keeps RESERVE_BYTES (folder.py) for the
# end of a run on a disk that fills. Less than this, the disk fills within the run.
MIN_FREE_BYTES = 16 * 2**20


def check_store(path: Path) -> None:
    """The store at `path` (made later when missing) can take a run."""
    what = f"--store {path}"
    if path.is_dir():
        raise StorageUnusable(f"{what} is a folder; give the store's file (new, or a store)")
    check_folder(path.parent, what)
    if not path.exists():
        return
    db = connect_existing(path, what)
    try:
        try:
            problems = [row[0] for row in db.execute("PRAGMA quick_check").fetchall()]
        except sqlite3.DatabaseError as error:  # damage that stops the check itself
            problems = [str(error)]
        if problems != ["ok"]:
            first = " ".join(problems[0].replace("*** in database main ***", "").split())
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise StorageUnusable(
                f"{what} is damaged: SQLite's quick_check says {first!r}{more}; move it "
                "away and start a new store (`collector results` may still read what is whole)"
            )
        db.execute("BEGIN IMMEDIATE")  # the write lock, taken and given back: nothing written
        db.execute("ROLLBACK")
    except sqlite3.Error as error:
        reason = "it is read-only" if "readonly" in str(error) else f"SQLite says: {error}"
        raise StorageUnusable(f"{what} cannot take a run: {reason}") from error
    finally:
        db.close()


def check_folder(path: Path, what: str) -> None:
    """`path`, a folder (made later when missing), can be made and written, with
    MIN_FREE_BYTES free on its file system; `what` names it in the refusal."""
    path = path.absolute()
    if path.exists() and not path.is_dir():
        raise StorageUnusable(f"{what}: {path} is a file, not a folder")
    base = next(p for p in (path, *path.parents) if p.exists() or p.is_symlink())
    if not base.is_dir():
        raise StorageUnusable(f"{what} cannot be made: {base} is a file, not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        readonly = os.statvfs(base).f_flag & os.ST_RDONLY
        where = "is on a read-only file system" if readonly else "is not writable by this user"
        raise StorageUnusable(f"{what} cannot be written: {base} {where}")
    free = shutil.disk_usage(base).free
    if free < MIN_FREE_BYTES:
        raise StorageUnusable(
            f"{what}: only {free / 2**20:.1f} MiB free on the file system of {base}; a run "
            f"starts with at least {MIN_FREE_BYTES // 2**20} MiB: free some or choose another "
            "place"
        )
