"""A run folder's unsaved cells (measured when the store's disk was full, store/folder.py) are
stored by `--resume` as they were measured (run/resume.py store_unsaved): each file moved to
unsaved/stored/, a cell the store already holds left alone, a file that is not an unsaved cell
refused with its name. The real command's road: tests/faults/test_full_disk.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from fwbench.collector.run.resume import store_unsaved
from fwbench.collector.store import PersistenceError, ResultStore
from fwbench.collector.store.folder import RunFolder

RUN = "run-1"


def _row(cell: int) -> dict[str, object]:
    return {"run_id": RUN, "cell": cell, "agent": "a", "status": "ok", "median_seconds": 0.5}


@pytest.fixture
def folder(tmp_path: Path) -> RunFolder:
    (tmp_path / "run").mkdir()
    return RunFolder(tmp_path / "run")


@pytest.fixture
def store(tmp_path: Path) -> ResultStore:
    store = ResultStore(tmp_path / "store.sqlite")
    store.start_run(RUN, tmp_path / "run", "2026-01-01T00:00:00+00:00", {"run_id": RUN})
    store.add_result(RUN, _row(0), [1, 2, 3])
    return store


def test_unsaved_cells_are_stored_as_measured_and_moved(
    folder: RunFolder, store: ResultStore
) -> None:
    telemetry = pd.DataFrame(
        {
            "time": pd.to_datetime([1_000, 2_000], unit="ns", utc=True),
            "metric": ["cpu", "cpu"],
            "label": ["", ""],
            "value": [0.5, 0.75],
        }
    )
    path = folder.write_unsaved(_row(1), [4, 5, 6], telemetry, "database or disk is full")
    held = folder.write_unsaved(_row(0), [9], None, "written by an older collector")
    said = store_unsaved(store, RUN, folder)
    assert said == [
        f"cell 0: {held} not stored, the store already holds that cell",
        f"cell 1: stored from {path} (3 samples measured before)",
    ]
    assert not path.exists() and (path.parent / "stored" / path.name).is_file()
    assert held.is_file()  # not the store's: left where it is
    assert list(store.results(RUN)["cell"]) == [0, 1]
    samples = store.samples(RUN)
    assert list(samples.loc[samples["cell"] == 1, "seconds"] * 1e9) == [4, 5, 6]
    assert list(store.telemetry(RUN)["value"]) == [0.5, 0.75]
    assert store_unsaved(store, RUN, folder) == [said[0]]  # once only


@pytest.mark.parametrize(
    "text", ["{", json.dumps({"row": {"cell": "x"}, "sample_nanoseconds": [], "telemetry": None})]
)
def test_a_file_that_is_no_unsaved_cell_is_refused_by_name(
    folder: RunFolder, store: ResultStore, text: str
) -> None:
    path = folder.path / "unsaved" / "cell-3.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(PersistenceError, match=str(path)):
        store_unsaved(store, RUN, folder)
    assert list(store.results(RUN)["cell"]) == [0] and path.is_file()
