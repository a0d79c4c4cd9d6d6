"""The user's model file when something goes wrong mid-run, with the real collector command
and fake readers (tests/runtime/fake_plugin.py): an agent that reads the format but cannot load
the file gets failed rows naming it and its reason while the others' stand; a killed run
with --model resumes on the same file and refuses one whose digest changed."""

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

pytestmark = pytest.mark.timing  # a kill lands between cells

COLLECTOR = Path(sys.executable).with_name("collector")
MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}
READS = {"FAKE_MODEL_FORMATS": "onnx", "FAKE_MODEL_MICROS": "20000"}  # 20 ms a step


def _command(tmp_path: Path, agents: dict[str, dict[str, str]], *args: str) -> list[str]:
    manifests = write_fake_agents(tmp_path / "agents", agents)
    (tmp_path / "net.onnx").write_text(json.dumps(MODEL))
    return [
        str(COLLECTOR),
        "run",
        *("--manifests", str(manifests), "--model", "net.onnx", "--agents", ",".join(agents)),
        *("--scrape-interval", "0", "--store", str(tmp_path / "store.sqlite")),
        *("--out", str(tmp_path / "run"), *args),
    ]


def test_an_agent_that_cannot_load_the_file_fails_its_rows_alone(tmp_path: Path) -> None:
    agents = {"ref": READS, "picky": {**READS, "FAKE_MODEL_REJECT": "1"}}
    command = _command(tmp_path, agents, "--batch-sizes", "1,2", "--min-seconds", "0.1")
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # a failed cell: the run says so
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet").set_index("agent")
    assert set(rows.loc["ref", "status"]) == {"ok"}
    assert set(rows.loc["picky", "status"]) == {"failed"}
    assert rows.loc["picky", "error"].str.contains("net.onnx is not a readable onnx model").all()
    assert rows.loc["picky", "error"].str.contains("unknown opset 99").all()


def test_a_killed_model_run_resumes_on_the_same_file_only(tmp_path: Path) -> None:
    command = _command(tmp_path, {"ref": READS}, "--batch-sizes", "1,2,3", "--min-seconds", "1")
    with (tmp_path / "collector.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
    out = tmp_path / "run"
    deadline = time.monotonic() + 300
    while len(folder_rows(out)) < 1:
        assert process.poll() is None, (tmp_path / "collector.log").read_text()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    model = tmp_path / "net.onnx"
    kept = model.read_text()
    model.write_text(json.dumps({**MODEL, "scale": 3.0}))  # another file under the same name
    resume = [str(COLLECTOR), "run", "--resume", run_id, "--store", str(tmp_path / "store.sqlite")]
    changed = subprocess.run(resume, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert changed.returncode == 2, changed.stderr
    assert "changed since the run measured it" in " ".join(changed.stderr.split())
    model.write_text(kept)
    resumed = subprocess.run(resume, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    rows = folder_rows(out)
    assert sorted(rows["batch_size"]) == [1, 2, 3] and set(rows["status"]) == {"ok"}
    assert rows["outputs_match"].all() and rows["workload"].nunique() == 1
