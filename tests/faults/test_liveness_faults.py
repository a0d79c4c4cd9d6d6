"""No stalled or lost measurement, with real agent processes and the collector as a user runs
it (run/liveness.py): an agent stopped for 10 s and continued never leaves an `ok` row holding
the stall (the cell fails as STALLED and keeps its samples); a measuring thread stuck while its
process lives and beats is failed as hung within the hang timeout, and a fresh process
measures the rest; a collector stopped for longer than the hang timeout blames itself,
measures the cell again, and never kills the healthy agent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pandas as pd
import pytest
from fake_agent import write_fake_agents
from fault_cli import folder_rows

from fwbench.collector.run.liveness import STALL_GAP_SECONDS

pytestmark = pytest.mark.timing  # hang and stall timeouts against measured gaps

COLLECTOR = Path(sys.executable).with_name("collector")


def start_sweep(
    tmp_path: Path, env: Mapping[str, str], hang_timeout: float
) -> tuple[subprocess.Popen[bytes], Path]:
    """`collector run` of three gemm cells (batch sizes 1, 2, 3) of 20 ms steps for 3 s each,
    on an agent the collector starts; returns the process and its run folder."""
    manifests = write_fake_agents(tmp_path / "agents", {"fake": env})
    out = tmp_path / "run"
    command = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,2,3",
        "--param",
        "m=20000",  # 20 ms a step
        "--min-seconds",
        "3",
        "--hang-timeout",
        f"{hang_timeout:g}",
        "--cell-timeout",
        "600",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(out),
    ]
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    return process, out


def first_row(process: subprocess.Popen[bytes], out: Path) -> pd.Series:
    """The first cell's row, once it is in the run folder."""
    deadline = time.monotonic() + 300
    while len(folder_rows(out)) < 1:
        assert process.poll() is None and time.monotonic() < deadline, process.stderr
        time.sleep(0.2)
    return folder_rows(out).iloc[0]


def finished(process: subprocess.Popen[bytes], out: Path) -> tuple[str, pd.DataFrame]:
    stdout, stderr = process.communicate(timeout=300)
    words = " ".join((stdout.decode() + stderr.decode()).split())  # the console wraps lines
    return words, folder_rows(out).sort_values("cell")


def test_an_agent_stopped_for_10_s_leaves_no_ok_row_and_its_samples_are_kept(
    tmp_path: Path,
) -> None:
    process, out = start_sweep(tmp_path, {}, hang_timeout=30)
    pid = int(first_row(process, out)["agent_pid"])
    time.sleep(1.0)  # into the second cell's timed loop
    os.kill(pid, signal.SIGSTOP)
    time.sleep(10)
    os.kill(pid, signal.SIGCONT)
    output, rows = finished(process, out)
    assert process.returncode == 1, output
    assert list(rows["status"]) == ["ok", "failed", "ok"]
    stalled = rows.iloc[1]
    assert stalled["error_code"] == "STALLED"
    assert "a sample may span the stall" in stalled["error"]
    assert f"its {int(stalled['n'])} samples are kept with this row" in stalled["error"]
    samples = pd.read_parquet(out / "samples.parquet")
    kept = samples[samples["cell"] == stalled["cell"]]["seconds"]
    assert len(kept) == stalled["n"] and kept.max() > 9.5  # the sample that spans the stop
    assert set(rows["agent_pid"]) == {pid}  # stalled, not hung: not killed


def test_a_stuck_measuring_thread_is_failed_within_the_hang_timeout_and_restarted(
    tmp_path: Path,
) -> None:
    # Batch size 2's 30th step (the 24th timed one) never returns; heartbeats go on.
    process, out = start_sweep(tmp_path, {"FAKE_STUCK": "2:30"}, hang_timeout=5)
    pid = int(first_row(process, out)["agent_pid"])
    began = time.monotonic()
    output, rows = finished(process, out)
    assert process.returncode == 1, output
    assert list(rows["status"]) == ["ok", "failed", "ok"]
    stuck = rows.iloc[1]
    assert stuck["error_code"] == "HUNG"
    assert "sent heartbeats but made no progress for 5 s (at measure" in stuck["error"]
    assert "its measuring thread is stuck" in stuck["error"]
    assert rows["agent_pid"].iloc[2] != pid  # a fresh process measured the rest
    assert not Path(f"/proc/{pid}").exists()  # the stuck process was killed
    assert time.monotonic() - began < 60  # not the 600 s cell timeout


def test_a_frozen_collector_names_itself_and_leaves_the_agent(tmp_path: Path) -> None:
    # The agent marks the second cell's 5th step: the collector is then inside that cell
    # whatever the load (a fixed second after the first row once found it still between cells
    # on a loaded host, where a freeze is rightly nobody's fault).
    marked = tmp_path / "second-cell-measuring"
    process, out = start_sweep(tmp_path, {"FAKE_MARK": f"2:5:{marked}"}, hang_timeout=5)
    pid = int(first_row(process, out)["agent_pid"])
    deadline = time.monotonic() + 300
    while not marked.exists():
        assert process.poll() is None and time.monotonic() < deadline, "no second cell"
        time.sleep(0.05)
    # The collector, longer than the hang timeout and than the gap limit of any stage: a
    # loaded host may still hold the second cell in its warm-up here, whose limit is 15 s
    # (8 s there was a freeze the collector rightly did not count against the cell).
    process.send_signal(signal.SIGSTOP)
    time.sleep(STALL_GAP_SECONDS + 1)
    process.send_signal(signal.SIGCONT)
    output, rows = finished(process, out)
    assert process.returncode == 0, output
    assert list(rows["status"]) == ["ok", "ok", "ok"]
    assert set(rows["agent_pid"]) == {pid}  # never killed nor restarted
    assert "the collector itself was stopped for" in output
    assert "measuring the cell again" in output
    assert json.loads((out / "run.json").read_text())["status"] == "ok"
