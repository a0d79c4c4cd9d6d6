"""A hung agent is noticed in bounded time, whatever the cell timeout: SIGSTOP a real agent
mid-cell and the collector fails that cell as hung after --hang-timeout, kills the stopped
process, starts a fresh one and measures the rest of the sweep."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_agent import write_fake_agents
from fault_cli import folder_rows

pytestmark = pytest.mark.timing  # hang timeouts against measured gaps

COLLECTOR = Path(sys.executable).with_name("collector")


def test_a_stopped_agent_is_hung_killed_restarted_and_the_sweep_goes_on(tmp_path: Path) -> None:
    manifests = write_fake_agents(tmp_path / "agents", {"sleepy": {}})
    out = tmp_path / "run"
    command = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "sleepy",
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
        "5",
        "--cell-timeout",
        "600",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(out),
    ]
    started = time.monotonic()
    process = subprocess.Popen(
        command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while len(folder_rows(out)) < 1:
        assert process.poll() is None and time.monotonic() < deadline, process.stderr
        time.sleep(0.2)
    pid = int(folder_rows(out)["agent_pid"].iloc[0])
    time.sleep(1.0)  # into the second cell's timed loop
    os.kill(pid, signal.SIGSTOP)
    _, stderr = process.communicate(timeout=300)
    elapsed = time.monotonic() - started
    assert process.returncode == 1, stderr.decode()
    rows = folder_rows(out).sort_values("cell")
    assert list(rows["status"]) == ["ok", "failed", "ok"]
    # silent from the start, or after a heartbeat that came before the stop: both true
    error = rows["error"].iloc[1]
    assert re.search(r"sent nothing for (the last )?\d+ s", error), error
    assert "hung, stopped or frozen" in error
    assert rows["agent_pid"].iloc[2] != pid  # a fresh process measured the rest
    assert elapsed < 120  # not the 600 s cell timeout
    assert not Path(f"/proc/{pid}").exists()  # the stopped process was killed, not left behind
    assert json.loads((out / "run.json").read_text())["status"] == "failed"
