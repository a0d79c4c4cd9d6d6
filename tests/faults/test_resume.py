"""A killed collector loses nothing it measured, and `collector run --resume RUN_ID` finishes
its run: the real collector command, real local agents (the framework-free fake plugin),
SIGKILL and SIGINT sent to the collector mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from fake_agent import write_fake_agents
from fault_cli import folder_rows
from interrupted import with_sigint

pytestmark = pytest.mark.timing  # an interrupt or a kill lands between cells

COLLECTOR = Path(sys.executable).with_name("collector")
BATCH_SIZES = "1,2,3,4,5"


def _collector(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COLLECTOR), *args, "--store", str(tmp_path / "store.sqlite")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _start(tmp_path: Path, out: Path) -> subprocess.Popen[bytes]:
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
        BATCH_SIZES,
        "--param",
        "m=20000",  # 20 ms a step
        "--min-seconds",
        "1",
        "--scrape-interval",
        "0.5",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(out),
    ]
    with (tmp_path / "collector.log").open("wb") as log:  # the child keeps its own copy
        return subprocess.Popen(
            with_sigint(command), cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT
        )


def _waitfolder_rows(process: subprocess.Popen[bytes], out: Path, count: int) -> pd.DataFrame:
    deadline = time.monotonic() + 300
    while len(folder_rows(out)) < count:
        assert process.poll() is None, (out.parent / "collector.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return folder_rows(out)


def _listed_status(tmp_path: Path, run_id: str) -> str:
    listed = _collector(tmp_path, "results", "--json")
    assert listed.returncode == 0, listed.stderr
    return next(run["status"] for run in json.loads(listed.stdout) if run["run_id"] == run_id)


def test_a_killed_collectors_run_is_interrupted_and_resume_measures_only_the_rest(
    tmp_path: Path,
) -> None:
    """A collector killed mid-run: its run is listed interrupted; `--resume` refuses an unknown
    run, another selection and agents changed since, losing and claiming nothing, then measures
    only the cells left with a new agent."""
    unknown = _collector(tmp_path, "run", "--resume", "20250101-000000-dead")
    assert unknown.returncode == 2 and "there is no such file" in unknown.stderr  # no store yet
    out = tmp_path / "run"
    process = _start(tmp_path, out)
    before = _waitfolder_rows(process, out, 2)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    # Frozen mid-run, so that the run cannot finish while a second collector starts (on a
    # loaded CI host that start outlasted the three cells left, and the kill met a finished run).
    os.kill(process.pid, signal.SIGSTOP)
    # While it measures, the run is its collector's: no second collector takes it over.
    busy = _collector(tmp_path, "run", "--resume", run_id)
    assert busy.returncode == 2, busy.stderr
    assert "still being measured by collector pid" in busy.stderr
    assert process.poll() is None  # killed mid-run, as the test means
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    before = folder_rows(out)  # what the killed collector had committed and exported
    assert _listed_status(tmp_path, run_id) == "interrupted"
    assert json.loads((out / "run.json").read_text())["status"] == "running"

    unknown = _collector(tmp_path, "run", "--resume", "20250101-000000-dead")
    assert unknown.returncode == 2 and "no run '20250101-000000-dead'" in unknown.stderr
    wrong = _collector(tmp_path, "run", "--resume", run_id, "--batch-sizes", "7")
    assert wrong.returncode == 2 and "drop --batch-sizes" in wrong.stderr, wrong.stderr
    # The agent is rebuilt as another variant: its rows would not compare with the kept ones.
    manifest = tmp_path / "agents" / "manifests" / "steady.toml"
    built = manifest.read_text()
    manifest.write_text(built.replace('variant = "cpu"', 'variant = "other"'))
    changed = _collector(tmp_path, "run", "--resume", run_id)
    assert changed.returncode == 2, changed.stderr
    assert "agent steady changed" in changed.stderr and "variant" in changed.stderr
    pd.testing.assert_frame_equal(folder_rows(out), before)  # nothing lost
    assert _listed_status(tmp_path, run_id) == "interrupted"  # nothing claimed either
    manifest.write_text(built)  # the agent as the run measured it: resumed
    resumed = _collector(tmp_path, "run", "--resume", run_id)
    assert resumed.returncode == 0, resumed.stderr

    rows = folder_rows(out).sort_values("cell")
    assert rows["cell"].tolist() == list(range(5))
    assert set(rows["status"]) == {"ok"}
    assert rows["batch_size"].tolist() == [1, 2, 3, 4, 5]  # each cell where the plan put it
    kept = rows[rows["cell"].isin(before["cell"])]
    columns = ["cell", "median_seconds", "agent_pid", "measure_started_at"]
    pd.testing.assert_frame_equal(
        kept[columns].reset_index(drop=True),
        before.sort_values("cell")[columns].reset_index(drop=True),
    )
    assert set(rows["agent_pid"]) - set(before["agent_pid"])  # the rest by a new agent
    metadata = json.loads((out / "run.json").read_text())
    assert metadata["status"] == "ok" and metadata["statuses"] == {"ok": 5}
    assert len(metadata["resumed"]) == 1
    assert _listed_status(tmp_path, run_id) == "ok"
    samples = _collector(tmp_path, "results", run_id, "--samples", "--export", "s.csv")
    assert samples.returncode == 0, samples.stderr
    assert set(pd.read_csv(tmp_path / "s.csv")["cell"]) == set(range(5))

    again = _collector(tmp_path, "run", "--resume", run_id)
    assert again.returncode == 2 and "nothing to resume" in again.stderr, again.stderr


def test_resume_after_ctrl_c_measures_the_cancelled_cell_again(tmp_path: Path) -> None:
    out = tmp_path / "run"
    process = _start(tmp_path, out)
    _waitfolder_rows(process, out, 1)
    time.sleep(0.5)  # into the second cell
    process.send_signal(signal.SIGINT)
    assert process.wait(timeout=120) == 130, (tmp_path / "collector.log").read_text()
    rows = folder_rows(out)
    assert "cancelled" in set(rows["status"]), rows[["cell", "status"]]
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    assert _listed_status(tmp_path, run_id) == "interrupted"

    resumed = _collector(tmp_path, "run", "--resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    rows = folder_rows(out).sort_values("cell")
    assert rows["cell"].tolist() == list(range(5))
    assert set(rows["status"]) == {"ok"}
