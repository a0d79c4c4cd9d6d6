"""`collector results --merge`: another store's runs join this one whole (rows, samples,
telemetry as stored), merging again adds only what is new, and a conflict merges nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from fwbench.collector.cli import app
from fwbench.collector.stats.samples import sample_stats
from fwbench.collector.store import ResultStore
from fwbench.collector.store.merge import STORE_NAME
from fwbench.collector.store.schema import SCHEMA_VERSION

from .conftest import synthetic_row

KEY = ("gemm", "infer", 1)


def measure(db: ResultStore, run_id: str, cells: range, seed: int = 0) -> None:
    """Cells of `run_id` with step times and, for each, two telemetry points."""
    for cell in cells:
        ns = np.random.default_rng(seed + cell).integers(1_000_000, 2_000_000, 20).tolist()
        row = synthetic_row(run_id, cell, "fake", KEY, 0) | sample_stats(ns)
        telemetry = pd.DataFrame(
            {
                "time": pd.to_datetime([1_700_000_000 + cell, 1_700_000_001], unit="s", utc=True),
                "metric": ["fwbench_process_cpu_seconds_total"] * 2,
                "label": ["", ""],
                "value": [1.0 + cell, 2.0 + cell],
            }
        )
        db.add_result(run_id, row, ns, telemetry)


def job_store(folder: Path, cells: range, status: str | None = "ok") -> Path:
    """A run folder with its own store, as an exported Slurm job leaves it."""
    db = ResultStore(folder / STORE_NAME)
    db.start_run("job-run", folder, "2026-11-29T01:00:00+00:00", {"run_id": "job-run"})
    measure(db, "job-run", cells)
    if status:
        db.finish_run("job-run", status, "2026-11-29T01:05:00+00:00", {"run_id": "job-run"})
    db.close()
    return folder


def merge(target: Path, source: Path, *extra: str) -> tuple[int, str]:
    done = CliRunner().invoke(
        app,
        ["results", "--store", str(target), "--merge", str(source), *extra],
        env={"COLUMNS": "200"},
    )
    return done.exit_code, " ".join(done.output.split())


def test_a_job_folders_run_joins_the_store_whole_and_again_adds_nothing(tmp_path: Path) -> None:
    target = tmp_path / "mine.sqlite"
    mine = ResultStore(target)
    mine.start_run("mine", tmp_path, "2026-11-28T00:00:00+00:00", {"run_id": "mine"})
    measure(mine, "mine", range(2), seed=7)
    mine.close()
    folder = job_store(tmp_path / "job", range(3))
    code, said = merge(target, folder)
    assert code == 0, said
    assert "run job-run (ok): 3 cells added" in said and "merged 1 runs" in said
    merged, source = ResultStore(target, create=False), ResultStore(folder / STORE_NAME, False)
    assert list(merged.runs()["run_id"]) == ["mine", "job-run"]
    pd.testing.assert_frame_equal(merged.results("job-run"), source.results("job-run"))
    pd.testing.assert_frame_equal(merged.samples("job-run"), source.samples("job-run"))
    pd.testing.assert_frame_equal(merged.telemetry("job-run"), source.telemetry("job-run"))
    assert merged.run_metadata("job-run") == source.run_metadata("job-run")
    assert len(merged.results("mine")) == 2  # what was there stays
    code, said = merge(target, folder)
    assert code == 0 and "run job-run (ok): already held, the same" in said
    assert len(ResultStore(target, create=False).results("job-run")) == 3


def test_a_run_merged_while_it_ran_gains_its_later_cells_and_status(tmp_path: Path) -> None:
    target = tmp_path / "mine.sqlite"
    early = job_store(tmp_path / "early", range(2), status=None)
    code, said = merge(target, early)
    assert code == 0 and "run job-run (running): 2 cells added (still running" in said
    later = job_store(tmp_path / "later", range(4))
    code, said = merge(target, later)
    assert code == 0 and "run job-run (ok): 2 cells added" in said
    db = ResultStore(target, create=False)
    assert list(db.results("job-run")["cell"]) == [0, 1, 2, 3]
    assert db.runs().set_index("run_id").loc["job-run", "status"] == "ok"
    code, said = merge(target, early)  # the older record never takes the fuller one's place
    assert code == 0 and "the store holds more of it (4 cells): kept as it is" in said
    assert (
        ResultStore(target, create=False).runs().set_index("run_id").loc["job-run", "status"]
        == "ok"
    )


def test_a_differing_cell_merges_nothing_and_says_which(tmp_path: Path) -> None:
    target = tmp_path / "mine.sqlite"
    job_store(tmp_path / "first", range(2))
    merge(target, tmp_path / "first")
    other = tmp_path / "other"
    db = ResultStore(other / STORE_NAME)
    db.start_run("job-run", other, "2026-11-29T01:00:00+00:00", {"run_id": "job-run"})
    measure(db, "job-run", range(3), seed=99)  # the same run id, other step times
    db.start_run("another", other, "2026-11-29T02:00:00+00:00", {"run_id": "another"})
    measure(db, "another", range(1))
    db.close()
    code, said = merge(target, other)
    assert code == 2 and "run job-run: cells 0, 1 differ between the two stores" in said
    kept = ResultStore(target, create=False)
    assert list(kept.runs()["run_id"]) == ["job-run"]  # not even the run without conflict
    assert len(kept.results("job-run")) == 2


def test_what_cannot_be_merged_is_refused_in_one_line(tmp_path: Path) -> None:
    target = tmp_path / "mine.sqlite"
    code, said = merge(target, tmp_path / "nowhere")
    assert code == 2 and "nowhere does not exist" in said
    (tmp_path / "empty").mkdir()
    code, said = merge(target, tmp_path / "empty")
    assert code == 2 and f"holds no {STORE_NAME}" in said
    (tmp_path / "notes.sqlite").write_bytes(b"not a database at all" * 100)
    code, said = merge(target, tmp_path / "notes.sqlite")
    assert code == 2 and "not a readable SQLite database" in said
    newer = job_store(tmp_path / "newer", range(1))
    with sqlite3.connect(newer / STORE_NAME) as raw:
        raw.execute("UPDATE runs SET schema_version = ?", (SCHEMA_VERSION + 1,))
    code, said = merge(target, newer)
    assert code == 2 and "stored by a newer collector" in said
    code, said = merge(target, newer, "job-run")
    assert code == 2 and "give no RUN_ID with it" in said
    code, said = merge(target, target)
    assert code == 2 and "is the store merged into" in said
