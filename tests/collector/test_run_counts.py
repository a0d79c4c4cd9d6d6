"""run.json's `statuses` count what the store holds (run/recording.py): a cell the store committed
whose run-folder write then failed (the folder's disk full) is counted, as the folder's tables,
rewritten from the store at the run's end, show it. The real command on a real full disk:
tests/faults/test_full_disk.py (needs root)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pandas as pd
import pytest

from fwbench.collector.run.recording import Recorder, finish_run
from fwbench.collector.store import PersistenceError, ResultStore, RunFolder
from fwbench.collector.store.database import saving

RUN = "run-1"


class FillingFolder(RunFolder):
    """A run folder whose disk fills after `room` results writes; giving the reserve back
    (release(), at the run's end) makes room again."""

    def __init__(self, path: Path, room: int) -> None:
        super().__init__(path)
        self.room = room

    def write_results(self, results: pd.DataFrame) -> None:
        if self.room <= 0:
            with saving(str(self.path)):
                raise OSError(errno.ENOSPC, "No space left on device")
        self.room -= 1
        super().write_results(results)

    def release(self) -> None:
        super().release()
        self.room = 1_000


def _row(cell: int, status: str = "ok") -> dict[str, object]:
    return {"run_id": RUN, "cell": cell, "agent": "a", "status": status, "median_seconds": 0.5}


def _recorded(tmp_path: Path, kept: dict[str, int] | None = None) -> Recorder:
    """Three cells recorded; the third's folder write fails for want of space."""
    store = ResultStore(tmp_path / "store.sqlite")
    folder = FillingFolder(tmp_path / "run", room=2)
    folder.create()
    store.start_run(RUN, folder.path, "2026-01-01T00:00:00+00:00", {"run_id": RUN})
    recorder = Recorder(RUN, store, folder, statuses=kept)
    recorder.record(_row(0), [1, 2], None)
    recorder.record(_row(1, "unsupported"), [], None)
    with pytest.raises(PersistenceError, match="No space left on device"):
        recorder.record(_row(2), [3, 4], None)
    assert list(store.results(RUN)["cell"]) == [0, 1, 2]  # committed before the folder failed
    return recorder


def test_run_json_counts_the_cell_whose_folder_write_failed(tmp_path: Path) -> None:
    recorder = _recorded(tmp_path)
    metadata = {"run_id": RUN, "status": "running"}
    finish_run(recorder, metadata, 5, False, "PersistenceError: No space left on device")
    written = json.loads((tmp_path / "run" / "run.json").read_text())
    folder_rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert written["statuses"] == {"ok": 2, "unsupported": 1}
    assert written["statuses"] == folder_rows["status"].value_counts().to_dict()
    assert written["status"] == "failed" and metadata["statuses"] == written["statuses"]


def test_the_commits_are_counted_when_the_store_cannot_be_read_back(tmp_path: Path) -> None:
    recorder = _recorded(tmp_path, kept={"ok": 4, "failed": 1})  # a resumed run's kept rows
    recorder.store.close()
    assert recorder.recorded_statuses() == {"ok": 6, "unsupported": 1, "failed": 1}
