"""Two collectors on one agent: a real numpy-cpu agent, started here, and two `collector run`
commands attached to it so that their runs overlap. The agent refuses the second caller's Run
(FAILED_PRECONDITION, naming the run it is busy with); the second collector says so at once
("agent busy") and fails its cells without measuring them, never waiting silently; the first
run is not disturbed and its cells stay ok."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest

from fwbench.collector.launchers import AgentHandle

COLLECTOR = Path(sys.executable).with_name("collector")
GEMM = ["--workloads", "gemm", "--phases", "infer", "--param", "m=256", "--param", "n=256"]

pytestmark = pytest.mark.agent


def _start(folder: Path, address: str, *args: str) -> subprocess.Popen[str]:
    folder.mkdir()
    command = [
        str(COLLECTOR),
        "run",
        "--agents",
        f"numpy-cpu@{address}",
        *GEMM,
        *args,
        "--store",
        str(folder / "store.sqlite"),
        "--out",
        str(folder / "run"),
    ]
    return subprocess.Popen(
        command,
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "400"},  # one line per cell, however long
    )


def _lines(process: subprocess.Popen[str], into: list[tuple[float, str]]) -> threading.Thread:
    def read() -> None:
        assert process.stdout is not None
        with process.stdout:
            for line in process.stdout:
                into.append((time.monotonic(), line.rstrip()))

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


def _wait_for(path: Path, process: subprocess.Popen[str], seconds: float) -> float:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, f"exited early: {process.returncode}"
        assert time.monotonic() < deadline, f"no {path} within {seconds} s"
        time.sleep(0.02)
    return time.monotonic()


def _wait_measuring(metrics: str, process: subprocess.Popen[str], seconds: float) -> None:
    """Until the agent's /metrics says a workload is running (fwbench_workload_running 1)."""
    deadline = time.monotonic() + seconds
    while True:
        assert process.poll() is None, f"exited early: {process.returncode}"
        assert time.monotonic() < deadline, f"the agent measured nothing within {seconds} s"
        try:
            with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=5) as response:
                text = response.read().decode()
        except OSError:
            text = ""
        if re.search(r"^fwbench_workload_running 1(\.0)?$", text, re.MULTILINE):
            return
        time.sleep(0.05)


def test_a_second_collector_on_a_busy_agent_says_so_at_once_and_measures_nothing(
    numpy_agent: AgentHandle, tmp_path: Path
) -> None:
    # Three cells of at least 5 s each: the second collector (a few seconds to start on a busy
    # machine) comes while the first measures.
    first = _start(
        tmp_path / "first", numpy_agent.address, "--batch-sizes", "1,2,3", "--min-seconds", "5"
    )
    first_output: list[tuple[float, str]] = []
    reader = _lines(first, first_output)
    _wait_for(tmp_path / "first" / "run" / "run.json", first, 120)
    # The second starts once the agent says it is measuring the first's cell (its /metrics),
    # not after a guessed delay: on a loaded host the first's start can take longer.
    _wait_measuring(numpy_agent.metrics_address, first, 120)
    second = _start(tmp_path / "second", numpy_agent.address, "--batch-sizes", "1,2")
    second_output: list[tuple[float, str]] = []
    second_reader = _lines(second, second_output)
    measuring = _wait_for(tmp_path / "second" / "run" / "run.json", second, 120)
    second.wait(timeout=120)
    second_reader.join(10)
    first_still_running = first.poll() is None
    first.wait(timeout=300)
    reader.join(10)
    text = "\n".join(line for _, line in second_output)

    # The second says at once that the agent is another caller's, and does not wait for it.
    assert second.returncode == 1, text
    assert first_still_running, "the second collector waited for the first run to end"
    busy = [t for t, line in second_output if "agent busy: numpy-cpu is measuring another" in line]
    assert busy, text
    # At once: while the first still measured (above), however long the host took to say it.
    print(f"'agent busy' {busy[0] - measuring:.2f} s after the second run began")
    assert "Traceback" not in text
    rows = pd.read_parquet(tmp_path / "second" / "run" / "results.parquet").sort_values("cell")
    assert list(rows["status"]) == ["failed", "failed"]
    assert list(rows["error_code"]) == ["AGENT_BUSY", "AGENT_BUSY"]
    # The agent names the run only to its own caller (a run id lets its holder cancel it).
    assert "busy with another caller's run" in rows["error"].iloc[0]
    assert "the agent's remaining cells are not measured" in rows["error"].iloc[0]
    assert rows["error"].iloc[1].startswith("not run: agent busy: numpy-cpu")

    # The first run was not disturbed: every cell measured, ok.
    first_text = "\n".join(line for _, line in first_output)
    assert first.returncode == 0, first_text
    rows = pd.read_parquet(tmp_path / "first" / "run" / "results.parquet")
    assert list(rows["status"]) == ["ok", "ok", "ok"]
