"""Tests for fwbench.collector.store.database (SQLite store, run folder) and schema.to_frame."""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fwbench.collector.store import PersistenceError, ResultStore, RunFolder
from fwbench.collector.store.folder import RESERVE, RESERVE_BYTES
from fwbench.collector.store.owner import ResumeRefused, this_collector
from fwbench.collector.store.schema import COLUMN_NAMES, COLUMNS, to_frame

RUN_ID = "20250101-000000-abcd"
STARTED = pd.Timestamp(1_700_000_000_123_456_789, tz="UTC")
ENDED = pd.Timestamp(1_700_000_002_987_654_321, tz="UTC")


def schema_dtypes() -> dict[str, Any]:
    return {c.name: pd.api.types.pandas_dtype(c.dtype) for c in COLUMNS}


@pytest.fixture
def rows() -> list[dict[str, Any]]:
    """An ok cell with statistics and timestamps, and a failed cell with a NaN and gaps."""
    common = {
        "schema_version": 1,
        "run_id": RUN_ID,
        "launcher": "attached",
        "agent": "fake",
        "framework": "none",
        "workload": "gemm",
        "kind": "op",
        "phase": "infer",
        "dtype": "float32",
        "params": json.dumps({"k": 8, "m": 8, "n": 8}),
        "seed": 0,
    }
    ok = {
        **common,
        "cell": 0,
        "batch_size": 1,
        "in_container": False,
        "usable_cores": np.int64(4),
        "n": 3,
        "median_seconds": 0.002,
        "mean_seconds": 0.002,
        "cv": 0.25,
        "gflops_per_second": 1.5,
        "measure_started_at": STARTED,
        "measure_ended_at": ENDED,
        "status": "ok",
    }
    failed = {
        **common,
        "cell": 1,
        "batch_size": 8,
        "in_container": True,
        "n": 0,
        "median_seconds": float("nan"),
        "cv": float("nan"),
        "status": "failed",
        "error_code": "INTERNAL",
        "error": "boom",
    }
    return [ok, failed]


@pytest.fixture
def store_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "results.sqlite"


@pytest.fixture
def store(store_path: Path) -> Iterator[ResultStore]:
    db = ResultStore(store_path)
    yield db
    db.close()


@pytest.fixture
def filled_store(store: ResultStore, rows: list[dict[str, Any]]) -> ResultStore:
    metadata = {"seed": 0, "collector": this_collector()}
    store.start_run(RUN_ID, Path("/somewhere/out"), "2025-01-01T00:00:00+00:00", metadata)
    store.add_result(RUN_ID, rows[0], [1_000_000, 3_000_000, 2_000_000])
    store.add_result(RUN_ID, rows[1], [])
    return store


# --- ResultStore ------------------------------------------------------------------------------


def test_result_store_creates_parent_folders(filled_store: ResultStore, store_path: Path) -> None:
    assert store_path.is_file()


def test_result_store_results_have_schema_columns_and_dtypes(filled_store: ResultStore) -> None:
    frame = filled_store.results(RUN_ID)
    assert tuple(frame.columns) == COLUMN_NAMES
    assert frame.dtypes.to_dict() == schema_dtypes()
    assert frame["cell"].tolist() == [0, 1]


@pytest.mark.parametrize(
    "timestamps",
    [
        # A run whose cells all failed or were unsupported carries no timestamps.
        {},
        # A clock with microsecond resolution (time.time_ns() on macOS) gives whole microseconds.
        {
            "measure_started_at": pd.Timestamp(1_700_000_000_123_456_000, tz="UTC"),
            "measure_ended_at": pd.Timestamp(1_700_000_001_000_000_000, tz="UTC"),
        },
    ],
    ids=["no-timestamps", "whole-microseconds"],
)
def test_result_store_results_datetime_columns_keep_schema_dtype(
    store: ResultStore, timestamps: dict[str, pd.Timestamp]
) -> None:
    # The table's datetime columns must have the schema's dtype whatever the data holds, or
    # results.parquet files of different runs get different timestamp units.
    store.start_run(RUN_ID, Path("out"), "2025-01-01T00:00:00+00:00", {})
    store.add_result(RUN_ID, {"run_id": RUN_ID, "cell": 0, "status": "ok", **timestamps}, [])
    frame = store.results(RUN_ID)
    expected = schema_dtypes()
    for name in ("measure_started_at", "measure_ended_at"):
        assert frame[name].dtype == expected[name], name
    for name, value in timestamps.items():
        assert frame.loc[0, name] == value


def test_result_store_results_round_trip_values(
    filled_store: ResultStore, rows: list[dict[str, Any]]
) -> None:
    frame = filled_store.results(RUN_ID)
    ok, failed = frame.iloc[0], frame.iloc[1]
    assert ok["workload"] == "gemm"
    assert ok["median_seconds"] == 0.002
    assert ok["usable_cores"] == 4
    assert not ok["in_container"]
    assert failed["in_container"]
    assert ok["measure_started_at"] == STARTED
    assert ok["measure_ended_at"] == ENDED
    assert json.loads(ok["params"]) == {"k": 8, "m": 8, "n": 8}
    assert failed["error"] == "boom"


def test_result_store_nan_round_trips_as_na(filled_store: ResultStore) -> None:
    frame = filled_store.results(RUN_ID)
    assert frame["cv"].isna().tolist() == [False, True]
    assert frame["median_seconds"].isna().tolist() == [False, True]
    assert frame.loc[1, "cv"] is pd.NA
    # Columns no row set are NA too, never NaN or a string "nan".
    assert frame["address"].isna().all()
    assert frame["measure_started_at"].isna().tolist() == [False, True]


def test_result_store_samples_long_format(filled_store: ResultStore) -> None:
    samples = filled_store.samples(RUN_ID)
    assert list(samples.columns) == ["cell", "iteration", "seconds"]
    assert samples["cell"].tolist() == [0, 0, 0]
    assert samples["iteration"].tolist() == [0, 1, 2]
    assert samples["seconds"].tolist() == pytest.approx([0.001, 0.003, 0.002])


def test_result_store_samples_of_unknown_run_is_empty(store: ResultStore) -> None:
    samples = store.samples("nope")
    assert list(samples.columns) == ["cell", "iteration", "seconds"]
    assert samples.empty


def test_result_store_second_store_sees_committed_rows(
    filled_store: ResultStore, store_path: Path
) -> None:
    other = ResultStore(store_path)
    try:
        pd.testing.assert_frame_equal(other.results(RUN_ID), filled_store.results(RUN_ID))
        pd.testing.assert_frame_equal(other.samples(RUN_ID), filled_store.samples(RUN_ID))
        assert other.run_metadata(RUN_ID) == {"seed": 0, "collector": this_collector()}
    finally:
        other.close()


def test_result_store_rows_survive_close(filled_store: ResultStore, store_path: Path) -> None:
    expected = filled_store.results(RUN_ID)
    filled_store.close()
    reopened = ResultStore(store_path)
    try:
        pd.testing.assert_frame_equal(reopened.results(RUN_ID), expected)
    finally:
        reopened.close()


def test_result_store_runs_lists_run_with_cell_count(filled_store: ResultStore) -> None:
    runs = filled_store.runs()
    assert runs["run_id"].tolist() == [RUN_ID]
    run = runs.iloc[0]
    assert run["cells"] == 2
    assert run["status"] == "running"
    assert run["out_dir"] == "/somewhere/out"
    assert run["started_at"] == "2025-01-01T00:00:00+00:00"
    assert run["finished_at"] is None or pd.isna(run["finished_at"])


@pytest.mark.parametrize(
    "owner",
    [
        None,  # stored before owners were recorded
        {"hostname": socket.gethostname(), "pid": 2**22 + 12345, "process_started": 1.0},
        # this pid, but another process start time: the pid was reused
        {**this_collector(), "process_started": 1.0},
    ],
)
def test_a_running_run_whose_collector_is_gone_is_listed_interrupted(
    store: ResultStore, owner: dict[str, Any] | None
) -> None:
    store.start_run("gone", Path("out"), "2025-01-02T00:00:00+00:00", {"collector": owner})
    assert store.runs()["status"].tolist() == ["interrupted"]


def test_a_run_on_another_host_is_never_taken_for_gone(store: ResultStore) -> None:
    owner = {**this_collector(), "hostname": "elsewhere.example"}
    store.start_run("far", Path("out"), "2025-01-02T00:00:00+00:00", {"collector": owner})
    assert store.runs()["status"].tolist() == ["running"]
    with pytest.raises(ResumeRefused, match="still being measured"):
        store.claim_run("far", this_collector())


def test_claim_refuses_a_live_run_and_takes_over_a_gone_one(filled_store: ResultStore) -> None:
    with pytest.raises(ResumeRefused, match=f"collector pid {os.getpid()}"):
        filled_store.claim_run(RUN_ID, this_collector())
    with pytest.raises(ResumeRefused, match="no run 'nope'"):
        filled_store.claim_run("nope", this_collector())
    filled_store.finish_run(RUN_ID, "interrupted", "2025-01-01T00:01:00+00:00", {"seed": 0})
    owner = {**this_collector(), "pid": 7}
    assert filled_store.claim_run(RUN_ID, owner)["collector"] == owner
    run = filled_store.runs().iloc[0]
    assert run["status"] == "interrupted"  # running, but pid 7 is not this collector
    assert filled_store.run_metadata(RUN_ID)["collector"] == owner  # type: ignore[index]


def test_forget_cells_deletes_rows_samples_and_telemetry(filled_store: ResultStore) -> None:
    filled_store.forget_cells(RUN_ID, [0])
    assert filled_store.results(RUN_ID)["cell"].tolist() == [1]
    assert set(filled_store.samples(RUN_ID)["cell"]) == set()


def test_a_failed_commit_reports_its_own_cause(
    filled_store: ResultStore, rows: list[dict[str, Any]]
) -> None:
    """SQLite rolls a transaction back itself on some errors (SQLITE_FULL): the error shown
    must be the cause, never "cannot rollback - no transaction is active"."""
    with pytest.raises(PersistenceError, match="UNIQUE constraint") as caught:
        filled_store.add_result(RUN_ID, rows[0], [1])  # cell 0 again
    assert "rollback" not in str(caught.value)
    assert filled_store.results(RUN_ID)["cell"].tolist() == [0, 1]


def test_result_store_runs_counts_run_without_results(store: ResultStore) -> None:
    store.start_run("empty", Path("out"), "2025-01-02T00:00:00+00:00", {})
    assert store.runs()[["run_id", "cells"]].to_dict("records") == [{"run_id": "empty", "cells": 0}]


def test_result_store_finish_run_updates_status(filled_store: ResultStore) -> None:
    filled_store.finish_run(RUN_ID, "failed", "2025-01-01T00:01:00+00:00", {"status": "failed"})
    run = filled_store.runs().iloc[0]
    assert run["status"] == "failed"
    assert run["finished_at"] == "2025-01-01T00:01:00+00:00"
    assert filled_store.run_metadata(RUN_ID) == {"status": "failed"}


def test_result_store_run_metadata_of_unknown_run_is_none(store: ResultStore) -> None:
    assert store.run_metadata("nope") is None


def test_result_store_duplicate_cell_raises_and_keeps_earlier_row(
    filled_store: ResultStore, rows: list[dict[str, Any]], store_path: Path
) -> None:
    before = filled_store.results(RUN_ID)
    samples_before = filled_store.samples(RUN_ID)
    with pytest.raises(PersistenceError) as caught:
        filled_store.add_result(RUN_ID, {**rows[0], "workload": "conv2d"}, [42])
    assert str(store_path) in str(caught.value)
    pd.testing.assert_frame_equal(filled_store.results(RUN_ID), before)
    pd.testing.assert_frame_equal(filled_store.samples(RUN_ID), samples_before)
    # The failed transaction was rolled back: the store keeps accepting rows.
    filled_store.add_result(RUN_ID, {**rows[0], "cell": 2}, [5])
    assert filled_store.results(RUN_ID)["cell"].tolist() == [0, 1, 2]


def test_result_store_duplicate_run_raises(filled_store: ResultStore) -> None:
    with pytest.raises(PersistenceError):
        filled_store.start_run(RUN_ID, Path("out"), "2025-01-01T00:00:00+00:00", {})


def test_result_store_parent_is_regular_file_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    path = blocker / "results.sqlite"
    with pytest.raises(PersistenceError) as caught:
        ResultStore(path)
    assert str(path) in str(caught.value)


# --- RunFolder --------------------------------------------------------------------------------


def test_run_folder_write_tables_round_trip(filled_store: ResultStore, tmp_path: Path) -> None:
    results = filled_store.results(RUN_ID)
    samples = filled_store.samples(RUN_ID)
    folder = RunFolder(tmp_path / "runs" / RUN_ID)
    folder.create()
    assert (folder.path / RESERVE).stat().st_size == RESERVE_BYTES  # room for the run's end
    folder.write_tables(results, samples)
    folder.write_tables(results, samples)  # rewritten in place
    folder.release()

    assert sorted(p.name for p in folder.path.iterdir()) == [
        "results.csv",
        "results.parquet",
        "samples.parquet",
    ]
    pd.testing.assert_frame_equal(pd.read_parquet(folder.path / "results.parquet"), results)
    pd.testing.assert_frame_equal(pd.read_parquet(folder.path / "samples.parquet"), samples)
    from_csv = pd.read_csv(folder.path / "results.csv")
    assert tuple(from_csv.columns) == COLUMN_NAMES
    pd.testing.assert_frame_equal(to_frame(from_csv.to_dict("records")), results)


def test_recorder_refreshes_results_every_cell_and_raw_tables_once_a_minute(
    store: ResultStore, rows: list[dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fwbench.collector.run import recording

    clock = [1000.0]
    monkeypatch.setattr(recording.time, "monotonic", lambda: clock[0])
    folder = RunFolder(tmp_path / "run")
    folder.create()
    store.start_run(RUN_ID, folder.path, "2025-01-01T00:00:00+00:00", {})
    recorder = recording.Recorder(RUN_ID, store, folder)
    recorder.record(rows[0], [1_000_000, 2_000_000], None)
    assert len(pd.read_parquet(folder.path / "results.parquet")) == 1
    assert not (folder.path / "samples.parquet").exists()  # not a minute yet
    clock[0] += recording.RAW_TABLES_INTERVAL_SECONDS
    recorder.record(rows[1], [3_000_000], None)
    assert len(pd.read_parquet(folder.path / "results.parquet")) == 2
    assert len(pd.read_parquet(folder.path / "samples.parquet")) == 3  # both cells' samples
    clock[0] += 1.0
    recorder.record({**rows[1], "cell": 2}, [4_000_000], None)
    assert len(pd.read_parquet(folder.path / "results.parquet")) == 3
    assert len(pd.read_parquet(folder.path / "samples.parquet")) == 3  # until the next minute
    assert len(store.samples(RUN_ID)) == 4  # the store has every sample at once


def test_run_folder_writes_metadata_without_temporary_files(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "run")
    folder.create()
    folder.write_metadata({"run_id": RUN_ID, "started": STARTED, "cores": np.int64(4)})
    assert sorted(p.name for p in folder.path.iterdir()) == [RESERVE, "run.json"]
    assert json.loads((folder.path / "run.json").read_text()) == {
        "run_id": RUN_ID,
        "started": STARTED.isoformat(),
        "cores": 4,
    }


def test_run_folder_in_regular_file_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PersistenceError):
        RunFolder(blocker / "run").create()


# --- schema.to_frame --------------------------------------------------------------------------


def test_to_frame_rejects_unknown_keys() -> None:
    with pytest.raises(KeyError, match="wall_seconds"):
        to_frame([{"run_id": RUN_ID, "wall_seconds": 1.0}])


def test_to_frame_empty_has_schema_columns() -> None:
    frame = to_frame([])
    assert tuple(frame.columns) == COLUMN_NAMES
    assert frame.empty


def test_to_frame_missing_values_are_na() -> None:
    frame = to_frame([{"run_id": RUN_ID, "cell": 3, "median_seconds": math.nan}])
    assert frame.loc[0, "cell"] == 3
    assert frame.loc[0, "median_seconds"] is pd.NA
    assert frame.loc[0, "workload"] is pd.NA
