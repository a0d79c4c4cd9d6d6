"""Interference, end to end: real agents (the sleeping fake plugin, so their own use of the
CPUs is near nothing and known) measured by the real `collector run` while the test runs a CPU
hog beside them (one spinning process per CPU), and without it. Cells under the hog are
`interfered`, said so at once, never called by `compare`, and measured again by
`--until-decided`; with no hog, no cell of an idle machine is."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import COLLECTOR, collector
from fake_agent import write_fake_agents
from quiet_host import hog, require_quiet_host

# Each test makes interference of its own; the three whose premise is an idle host check it
# first and skip, saying what they saw, on a busy one (quiet_host.py).
pytestmark = pytest.mark.timing

AGENTS = {"fast": {}, "slow": {"FAKE_STEP_SCALE": "1.5"}}
CELLS = (
    "--workloads",
    "gemm",
    "--phases",
    "infer",
    "--batch-sizes",
    "1",
    "--param",
    "m=3000",
    "--min-seconds",
    "0.3",
)


def _run_command(tmp_path: Path, *extra: str) -> tuple[list[str], Path]:
    manifests = write_fake_agents(tmp_path / "agents", AGENTS)
    out = tmp_path / "run"
    command = [
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        ",".join(AGENTS),
        *CELLS,
        "--out",
        str(out),
        *extra,
    ]
    return command, out


def _compared(tmp_path: Path, out: Path) -> dict[str, dict]:
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    done = collector("compare", run_id, "--baseline", "fast", "--format", "json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return {c["agent"]: c for c in json.loads(done.stdout)["comparisons"]}


def test_cells_beside_a_hog_are_interfered_and_never_called(tmp_path: Path, isolated_store) -> None:
    command, out = _run_command(tmp_path, "--repeat", "2", "--quiet-host", "1")
    with hog():
        done = collector(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}
    detail = rows[["agent", "others_cpu_percent", "steal_percent", "interference"]].to_string()
    assert rows["interfered"].all(), detail
    assert (rows["others_cpu_percent"] > 50).all(), detail  # a spinning process per CPU
    assert rows["interference"].str.startswith("other processes used ").all(), detail
    assert (rows["agent_cpus"] == len(os.sched_getaffinity(0))).all()
    # Said at once, on each cell's progress line (stderr), and in the summary's caption.
    said = " ".join(done.stderr.split())  # lines wrap at the console's width
    assert said.count("INTERFERED: other processes used") == len(rows), done.stderr
    assert "cell(s) interfered" in " ".join(done.stdout.split())
    # --quiet-host waited its second before each cell, in vain, and said so.
    assert said.count("Waiting for a quiet host (other processes used") == len(rows), said
    assert said.count("the host is still busy after 1 s (other processes used") == len(rows)
    slow = _compared(tmp_path, out)["slow"]
    assert slow["verdict"] == "undecided" and slow["evidence"] == "interfered processes", slow
    assert "every one of slow's 2 processes here was interfered" in slow["notes"]


@pytest.mark.quiet
def test_with_no_hog_no_cell_of_an_idle_machine_is_interfered(
    tmp_path: Path, isolated_store
) -> None:
    require_quiet_host()
    command, out = _run_command(tmp_path, "--repeat", "2")
    done = collector(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    detail = rows[["agent", "others_cpu_percent", "steal_percent", "interference"]].to_string()
    assert not rows["interfered"].any(), detail
    assert rows["interfered"].notna().all(), detail  # measured, not unknown
    assert (rows["others_cpu_percent"] < 10).all(), detail
    assert "INTERFERED" not in done.stderr


def _run_until_said(tmp_path: Path, command: list[str], stop_hog_at: str) -> str:
    """Runs the collector beside a hog that stops at the first progress line holding
    `stop_hog_at`; returns the progress lines (stderr)."""
    lines: list[str] = []
    with (
        hog() as running,
        subprocess.Popen(
            [COLLECTOR, *command],
            cwd=tmp_path,
            stdout=subprocess.PIPE,  # the summary
            stderr=subprocess.PIPE,  # the progress lines
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        ) as collector_process,
    ):
        summary: list[str] = []
        reader = threading.Thread(
            target=lambda: summary.append(collector_process.stdout.read()),  # type: ignore[union-attr]
            daemon=True,
        )
        reader.start()
        for line in collector_process.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if stop_hog_at in line:
                running.stop()
        code = collector_process.wait(timeout=600)
        reader.join()
    progress = "".join(lines)
    assert code == 0, progress + "".join(summary)
    assert stop_hog_at in progress, progress
    return progress


@pytest.mark.quiet
def test_quiet_host_waits_for_the_hog_to_stop_before_measuring(
    tmp_path: Path, isolated_store
) -> None:
    require_quiet_host()
    command, out = _run_command(tmp_path, "--quiet-host", "120")
    progress = " ".join(_run_until_said(tmp_path, command, "Waiting for a quiet host").split())
    assert "the host is quiet after" in progress, progress
    rows = pd.read_parquet(out / "results.parquet")
    assert not rows["interfered"].any() and rows["interfered"].notna().all()


@pytest.mark.quiet
def test_until_decided_measures_an_interfered_cell_again(tmp_path: Path, isolated_store) -> None:
    """The hog runs until the first cell is said to be interfered, then stops: that process is
    left out, its cell measured again in a later round, and the verdict comes from clean
    processes alone."""
    require_quiet_host()
    command, out = _run_command(tmp_path, "--until-decided", "--budget", "3m")
    _run_until_said(tmp_path, command, "INTERFERED")
    rows = pd.read_parquet(out / "results.parquet")
    spoiled = rows[rows["interfered"].fillna(False).astype(bool)]
    assert len(spoiled) >= 1
    decided = json.loads((out / "run.json").read_text())["until_decided"]
    (question,) = decided["decisions"]
    assert question["verdict"] == "slower", json.dumps(decided, indent=1)
    assert question["interfered"] == len(spoiled), question
    assert "process in round 1: other processes used" in question["interference"], question
    # The verdict's processes were the clean ones: no more than either side has.
    clean = rows[~rows["interfered"].fillna(False).astype(bool)]
    assert 2 <= question["repetitions"] <= clean.groupby("agent").size().min(), question
