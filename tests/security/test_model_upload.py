"""`collector run --model` with an attached agent (NAME@HOST:PORT), which may run on a host that
does not see this one's files: the collector sends it the model and the sample inputs
(UploadModel, protocol 1.9), the agent keeps them by digest in its own folder, a second run
sends nothing, and a changed file is sent again; an agent whose limit the file exceeds ends
the run with one line before anything is timed. Real `fwbench-agent` processes of the fake
plugin (security_agents.py), reading "onnx" files of JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from security_agents import StartAgent

from fwbench.spec import model_files

sys.path.insert(0, str(Path(__file__).parents[1] / "integration"))
from collector_cli import collector

MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}
READS = {"FAKE_MODEL_FORMATS": "onnx", "FAKE_MODEL_MICROS": "200"}


@pytest.fixture(autouse=True)
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))


def _run(tmp_path: Path, agent: str, model: Path, out: str, *extra: str):
    return collector(
        *("run", "--agents", f"fake@{agent}", "--model", str(model), "--batch-sizes", "1,2"),
        *("--min-seconds", "0.05", "--scrape-interval", "0", "--out", str(tmp_path / out)),
        *extra,
        cwd=tmp_path,
    )


def test_an_attached_agent_is_sent_the_model_once_and_runs_it(
    tmp_path: Path, start_agent: StartAgent
) -> None:
    kept = tmp_path / "agent-kept"
    agent = start_agent(env={**READS, "FWBENCH_UPLOAD_DIR": str(kept)})
    model = tmp_path / "net.onnx"
    model.write_text(json.dumps(MODEL))
    sample = tmp_path / "sample.npz"
    np.savez(sample, x=np.arange(6, dtype=np.float32).reshape(2, 3))
    said = []
    for out in ("first", "second"):
        done = _run(tmp_path, agent.address, model, out, "--inputs", str(sample))
        assert done.returncode == 0, done.stderr[-3000:]
        said.append(done.stdout + done.stderr)
        rows = pd.read_parquet(tmp_path / out / "results.parquet")
        assert set(rows["status"]) == {"ok"} and rows["outputs_match"].all()
        assert set(rows["launcher"]) == {"attached"}
    sent = "net.onnx to fake, which does not see this host's files:"
    assert f"{sent} received {model.stat().st_size:,} bytes" in said[0]
    assert f"{sent} held it already" in said[1]
    assert "inputs.npz to fake, which does not see this host's files: received" in said[0]
    digest = model_files.digest(model)
    assert (kept / digest / "net.onnx").read_bytes() == model.read_bytes()
    assert len(list(kept.iterdir())) == 2  # the model and the run's copy of the inputs
    model.write_text(json.dumps({**MODEL, "scale": 3.0}))  # another file: sent again
    done = _run(tmp_path, agent.address, model, "changed")
    assert done.returncode == 0 and f"{sent} received" in done.stdout + done.stderr


def test_a_file_over_the_agents_limit_ends_the_run_before_any_timing(
    tmp_path: Path, start_agent: StartAgent
) -> None:
    agent = start_agent(env={**READS, "FWBENCH_MAX_UPLOAD_BYTES": "10"})
    model = tmp_path / "net.onnx"
    model.write_text(json.dumps(MODEL))
    done = _run(tmp_path, agent.address, model, "run")
    assert done.returncode == 2, done.stderr[-3000:]
    size = model.stat().st_size
    assert (
        f"fake does not see this host's files, and net.onnx is {size} bytes where it takes at "
        "most 10 (its FWBENCH_MAX_UPLOAD_BYTES)" in done.stderr
    )
    assert not (tmp_path / "run" / "results.parquet").exists()
