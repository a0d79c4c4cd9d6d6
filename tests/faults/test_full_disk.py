"""A full disk under the store, under the run folder, or under both: the real collector command,
a real local agent (the fake plugin), a small tmpfs filled to the last byte mid-run. The run
must stop with the real cause (never "ok", never an unrelated SQLite message), keep every cell
committed before, keep the measured cell the store could not save in the run folder (named in
the error), end run.json in the run's real state, leave no partial file, and `--resume` must
finish it once there is room, storing the unsaved cell as it was measured. Mounting a tmpfs
needs root, as CI runs."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_agent import write_fake_agents
from fault_cli import folder_rows

COLLECTOR = Path(sys.executable).with_name("collector")
CELLS = 5

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    # Room for the 16 MiB a run must find free before it starts (store/integrity.py).
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


def _fill(disk: Path) -> Path:
    """Takes every free byte of `disk`; returns the file to delete to make room again."""
    filler = disk / "filler"
    chunk = b"\0" * 4096
    with filler.open("wb", buffering=0) as sink, contextlib.suppress(OSError):
        while True:
            sink.write(chunk)
    return filler


def _collector(store: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COLLECTOR), *args, "--store", str(store)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _run_and_fill(tmp_path: Path, store: Path, out: Path, disk: Path) -> tuple[int, str, Path]:
    """Starts a 5-cell run, fills `disk` once the first row is recorded, waits for the end."""
    manifests = write_fake_agents(tmp_path / "agents", {"steady": {}})
    command = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "steady",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,2,3,4,5",
        "--param",
        "m=20000",
        "--min-seconds",
        "1",
        "--store",
        str(store),
        "--out",
        str(out),
    ]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 300
    while len(folder_rows(out)) < 1:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)
    filler = _fill(disk)
    _, stderr = process.communicate(timeout=300)
    return process.returncode, stderr, filler


def _stored_rows(store: Path, run_id: str, cwd: Path) -> list[dict[str, object]]:
    """The run's rows the store holds (`collector results RUN --json`)."""
    stored = _collector(store, "results", run_id, "--json", cwd=cwd)
    assert stored.returncode == 0, stored.stderr
    return list(json.loads(stored.stdout))


def _unsaved_cell(stderr: str, out: Path, stored: list[dict[str, object]]) -> Path:
    """The cell the full store could not save is in the run folder, whole, and named, and not
    among the `stored` rows."""
    (unsaved,) = (out / "unsaved").iterdir()
    assert f"writtento{unsaved}instead" in "".join(stderr.split()), stderr  # wrapped lines
    kept = json.loads(unsaved.read_text())
    assert kept["row"]["status"] == "ok" and len(kept["sample_nanoseconds"]) >= 10
    assert "database or disk is full" in kept["why"]
    assert kept["row"]["cell"] not in {r["cell"] for r in stored}
    return unsaved


def _resumed_with_the_unsaved_cell(unsaved: Path, store: Path, run_id: str, cwd: Path) -> None:
    """`--resume` stores the unsaved cell as it was measured (not measured again), moves its
    file to unsaved/stored/ and says so; the run then ends ok with every cell."""
    kept = json.loads(unsaved.read_text())
    cell = kept["row"]["cell"]
    resumed = _collector(store, "run", "--resume", run_id, cwd=cwd)
    assert resumed.returncode == 0, resumed.stderr
    said = "".join((resumed.stdout + resumed.stderr).split())  # wrapped lines
    assert f"cell{cell}:storedfrom{unsaved}" in said, resumed.stdout
    assert not unsaved.exists() and (unsaved.parent / "stored" / unsaved.name).is_file()
    assert _run_status(store, run_id, cwd) == "ok"
    done = _collector(store, "results", run_id, "--json", cwd=cwd)
    (row,) = [r for r in json.loads(done.stdout) if r["cell"] == cell]
    # The same measurement (its JSON's float, read back through the store's, to the last bit
    # but one).
    assert row["median_seconds"] == pytest.approx(kept["row"]["median_seconds"], rel=1e-12)
    assert row["n"] == len(kept["sample_nanoseconds"])


def _run_status(store: Path, run_id: str, cwd: Path) -> str:
    listed = _collector(store, "results", "--json", cwd=cwd)
    assert listed.returncode == 0, listed.stderr
    return str(next(r["status"] for r in json.loads(listed.stdout) if r["run_id"] == run_id))


def test_a_full_disk_under_the_store_stops_the_run_with_its_cause(
    tmp_path: Path, small_disk: Path
) -> None:
    store, out = small_disk / "store.sqlite", tmp_path / "run"
    code, stderr, filler = _run_and_fill(tmp_path, store, out, small_disk)
    assert code == 1, stderr
    assert "database or disk is full" in stderr, stderr
    assert "rollback" not in stderr and "Traceback" not in stderr, stderr
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert f"--resume {run_id}" in stderr
    filler.unlink()
    recorded = _stored_rows(store, run_id, tmp_path)
    assert 1 <= len(recorded) < CELLS and {r["status"] for r in recorded} == {"ok"}
    assert _run_status(store, run_id, tmp_path) in ("failed", "interrupted")  # never ok
    unsaved = _unsaved_cell(stderr, out, recorded)
    assert json.loads((out / "run.json").read_text())["status"] == "failed"

    _resumed_with_the_unsaved_cell(unsaved, store, run_id, tmp_path)
    assert sorted(folder_rows(out)["cell"]) == list(range(CELLS))


def test_a_full_disk_under_the_run_folder_stops_the_run_and_keeps_the_store(
    tmp_path: Path, small_disk: Path
) -> None:
    store, out = tmp_path / "store.sqlite", small_disk / "run"
    code, stderr, filler = _run_and_fill(tmp_path, store, out, small_disk)
    assert code == 1, stderr
    assert "No space left on device" in stderr and "Traceback" not in stderr, stderr
    assert not list(out.glob(".*.tmp")), "a partial file was left in the run folder"
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert _run_status(store, run_id, tmp_path) == "failed"
    stored = _collector(store, "results", run_id, "--json", cwd=tmp_path)
    rows = json.loads(stored.stdout)
    assert len(rows) >= 2  # the cell whose folder write failed was committed to the store
    # The run's end had room (the folder's reserve): run.json says how it ended, and the
    # folder's tables were rewritten from the store.
    metadata = json.loads((out / "run.json").read_text())
    assert metadata["status"] == "failed"
    assert len(rows) == len(folder_rows(out)) and not (out / ".reserve").exists()
    # run.json counts the cells the store and the folder hold, the last one included (its
    # folder write failed after the store committed it).
    assert metadata["statuses"] == dict(Counter(row["status"] for row in rows)), metadata

    filler.unlink()
    resumed = _collector(store, "run", "--resume", run_id, cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(folder_rows(out)["cell"]) == list(range(CELLS))
    assert json.loads((out / "run.json").read_text())["status"] == "ok"


def test_a_full_disk_under_both_keeps_the_unsaved_cell_and_ends_run_json(
    tmp_path: Path, small_disk: Path
) -> None:
    store, out = small_disk / "store.sqlite", small_disk / "run"
    code, stderr, filler = _run_and_fill(tmp_path, store, out, small_disk)
    assert code == 1, stderr
    assert "database or disk is full" in stderr and "Traceback" not in stderr, stderr
    metadata = json.loads((out / "run.json").read_text())
    assert metadata["status"] == "failed" and "disk is full" in metadata["error"]
    assert not (out / ".reserve").exists() and not list(out.glob(".*.tmp"))
    run_id = metadata["run_id"]
    unsaved = _unsaved_cell(stderr, out, _stored_rows(store, run_id, tmp_path))

    filler.unlink()
    _resumed_with_the_unsaved_cell(unsaved, store, run_id, tmp_path)
    assert sorted(folder_rows(out)["cell"]) == list(range(CELLS))
    assert json.loads((out / "run.json").read_text())["status"] == "ok"
