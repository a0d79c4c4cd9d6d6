"""A store file is used only when it is an fwbench store, whole: an empty file, another
program's database, garbage or a damaged store is refused with one line naming it (never
reused as an empty store); `collector run` checks the store and the run folder before any agent
starts (store/integrity.py); a store is made whole or not at all; reading makes nothing."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

import pytest

from fwbench.collector.store import ResultStore, StorageUnusable
from fwbench.collector.store.integrity import MIN_FREE_BYTES, check_folder, check_store
from fwbench.collector.store.owner import this_collector

RUN = "20250101-000000-abcd"


def _filled(path: Path, runs: int = 1, cells: int = 1) -> Path:
    store = ResultStore(path)
    for number in range(runs):
        run_id = f"{RUN}{number}"
        store.start_run(run_id, path.parent, f"2025-01-01T00:00:{number:02d}", {"pad": "x" * 4000})
        for cell in range(cells):
            store.add_result(run_id, {"cell": cell, "status": "ok"}, list(range(400)))
    store.close()
    return path


def _garbage(path: Path) -> Path:
    path.write_bytes(os.urandom(20_000))
    return path


def _foreign(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")
    return path


def _no_tables(path: Path) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 1")  # a valid database, with no table
    return path


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: (p.write_bytes(b""), p)[1], "it is empty (0 bytes), not an fwbench store"),
        (_garbage, "not a readable SQLite database (SQLite says: file is not a database)"),
        (_foreign, "not an fwbench store (its tables: notes)"),
        (_no_tables, "an SQLite database with no tables, not an fwbench store"),
    ],
    ids=["empty", "garbage", "foreign", "no-tables"],
)
def test_a_file_that_is_not_a_store_is_refused_to_read_write_and_run(
    tmp_path: Path, make: object, said: str
) -> None:
    path = make(tmp_path / "store.sqlite")  # type: ignore[operator]
    before = path.read_bytes()
    for create, what in ((False, "cannot read"), (True, "cannot use")):
        with pytest.raises(StorageUnusable) as caught:
            ResultStore(path, create=create)
        assert str(caught.value).startswith(f"{what} the results store {path}: "), caught.value
        assert said in str(caught.value)
    with pytest.raises(StorageUnusable) as refused:
        check_store(path)
    assert str(refused.value).startswith(f"--store {path}: ") and said in str(refused.value)
    assert path.read_bytes() == before  # never reused, never touched


def test_a_damaged_store_is_refused_by_quick_check(tmp_path: Path) -> None:
    path = _filled(tmp_path / "store.sqlite", runs=20, cells=10)
    check_store(path)
    size = path.stat().st_size
    with path.open("r+b") as sink:  # garbage over the middle pages, the header intact
        sink.seek(size // 2)
        sink.write(os.urandom(8 * 4096))
    with pytest.raises(StorageUnusable) as caught:
        check_store(path)
    text = str(caught.value)
    assert text.startswith(f"--store {path} is damaged: SQLite's quick_check says ")
    assert "\n" not in text and "move it away" in text


def test_a_stored_text_that_is_not_json_is_a_damaged_store(tmp_path: Path) -> None:
    path = _filled(tmp_path / "store.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("UPDATE results SET row_json = 'x{'")
    with pytest.raises(StorageUnusable, match="a stored record is not JSON"):
        ResultStore(path, create=False).rows(f"{RUN}0")


def test_reading_a_missing_store_is_refused_and_makes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "none" / "store.sqlite"
    with pytest.raises(StorageUnusable, match=re.escape(f"store {path}: there is no such file")):
        ResultStore(path, create=False)
    assert not path.parent.exists()


def test_a_new_store_is_made_whole_with_no_file_left_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "new" / "store.sqlite"
    ResultStore(path).close()
    ResultStore(path).close()  # made once, then opened
    assert sorted(
        p.name for p in path.parent.iterdir() if not p.name.endswith(("-wal", "-shm"))
    ) == ["store.sqlite"]
    check_store(path)


def test_an_old_store_without_telemetry_gains_the_table(tmp_path: Path) -> None:
    path = _filled(tmp_path / "store.sqlite")
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE telemetry")
    check_store(path)  # an fwbench store from before 0.3
    assert ResultStore(path).telemetry(f"{RUN}0").empty


def test_claim_records_the_resume_at_once(tmp_path: Path) -> None:
    path = _filled(tmp_path / "store.sqlite")
    store = ResultStore(path)
    store.claim_run(f"{RUN}0", this_collector(), {"at": "now"})
    stored = ResultStore(path, create=False).run_metadata(f"{RUN}0")
    assert stored is not None and stored["resumed"] == [{"at": "now"}]
    assert stored["status"] == "running" and "finished_at" not in stored


def test_the_run_folder_must_be_makeable_and_writable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageUnusable, match=f"--out x cannot be made: {blocker} is a file"):
        check_folder(blocker / "run", "--out x")
    with pytest.raises(StorageUnusable, match=f"{blocker} is a file, not a folder"):
        check_folder(blocker, "--out x")
    with pytest.raises(StorageUnusable, match=f"--store {blocker}/s.sqlite: .* is a file"):
        check_store(blocker / "s.sqlite")
    with pytest.raises(StorageUnusable, match="is a folder"):
        check_store(tmp_path)
    check_folder(tmp_path / "a" / "b", "--out a/b")  # made later; nothing made now
    assert not (tmp_path / "a").exists()
    assert MIN_FREE_BYTES == 16 * 2**20
