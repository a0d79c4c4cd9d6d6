"""The collector's temporary folders carry its process id; the next command removes those of
a collector that is gone (killed with SIGKILL), never a running one's or another kind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.collector.agents import scratch


def _gone_pid() -> int:
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(done.stdout)


def test_folders_of_gone_collectors_are_removed_others_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)  # re-read TMPDIR
    gone = _gone_pid()
    stale = [tmp_path / f"fwbench-logs-{gone}-abc", tmp_path / f"fwbench-ports-{gone}-x_1"]
    kept = [
        tmp_path / f"fwbench-logs-{os.getpid()}-abc",  # a running collector's
        tmp_path / "fwbench-logs-k2j3h4_9",  # an older collector's name: no process id
        tmp_path / f"fwbench-lock-{gone}-abc",  # not a kind this module makes
    ]
    for folder in stale + kept:
        folder.mkdir()
        (folder / "agent.log").write_text("x")
    made = scratch.scratch_folder("logs")
    assert made.parent == tmp_path and made.name.startswith(f"fwbench-logs-{os.getpid()}-")
    assert not any(folder.exists() for folder in stale)
    assert all(folder.exists() for folder in kept)


def test_move_logs_moves_the_logs_and_removes_the_folder(tmp_path: Path) -> None:
    logs = tmp_path / "scratch"
    logs.mkdir()
    (logs / "a.log").write_text("started")
    (logs / "ports.json").write_text("{}")
    moved = scratch.move_logs(logs, tmp_path / "run" / "logs")
    assert moved == [tmp_path / "run" / "logs" / "a.log"] and moved[0].read_text() == "started"
    assert not logs.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert scratch.move_logs(empty, tmp_path / "other" / "logs") == []
    assert not (tmp_path / "other").exists() and not empty.exists()


def test_a_gone_collectors_logs_go_to_their_run_folder_never_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    gone = _gone_pid()
    run = tmp_path / "run"
    (run / "logs").mkdir(parents=True)
    (run / "logs" / "a.log").write_text("first command")
    resumed = tmp_path / f"fwbench-logs-{gone}-one"  # a resume killed (SIGKILL)
    no_run = tmp_path / f"fwbench-logs-{gone}-two"  # killed before its run folder was made
    for folder, target in ((resumed, run / "logs"), (no_run, tmp_path / "never" / "logs")):
        folder.mkdir()
        (folder / "a.log").write_text(folder.name)
        scratch.mark_logs(folder, target, "resume-1")
    scratch.scratch_folder("logs")
    assert not resumed.exists() and not no_run.exists()
    assert (run / "logs" / "a.log").read_text() == "first command"  # not overwritten
    assert (run / "logs" / "a.resume-1.log").read_text() == resumed.name
    assert not (tmp_path / "never").exists()  # an interrupted start keeps nothing


def test_a_gone_describes_logs_are_kept_where_it_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command without a run folder (describe, conformance) killed: its logs' folder is
    made for them (make=True), never deleted."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    folder = tmp_path / f"fwbench-logs-{_gone_pid()}-one"
    folder.mkdir()
    (folder / "a.log").write_text("described")
    target = tmp_path / "fwbench-results" / "logs" / "describe-1"
    scratch.mark_logs(folder, target, make=True)
    scratch.scratch_folder("logs")
    assert not folder.exists() and (target / "a.log").read_text() == "described"


def test_logs_whose_run_folder_cannot_take_them_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(scratch.tempfile, "tempdir", None)
    run = tmp_path / "run"
    run.mkdir()
    (run / "logs").write_text("a file where the logs folder goes")  # moving fails
    left = tmp_path / f"fwbench-logs-{_gone_pid()}-abc"
    left.mkdir()
    (left / "a.log").write_text("kept")
    scratch.mark_logs(left, run / "logs")
    scratch.scratch_folder("logs")
    assert (left / "a.log").read_text() == "kept"


def test_log_names_never_overwrite_an_earlier_commands(tmp_path: Path) -> None:
    for text in ("one", "two", "three"):
        logs = tmp_path / text
        logs.mkdir()
        (logs / "a.log").write_text(text)
        scratch.move_logs(logs, tmp_path / "run", "resume-1" if text != "one" else "")
    found = {p.name: p.read_text() for p in (tmp_path / "run").iterdir()}
    assert found == {"a.log": "one", "a.resume-1.log": "two", "a.resume-1.2.log": "three"}
