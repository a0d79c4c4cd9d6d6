"""A Keras file of varied layers through `collector run --model` on the three Keras agents, the
issue's first case without --export: saved on keras-torch (tests/equivalence/
keras_model_file.py's model: convolutions, a depthwise one, BatchNorm, an LSTM, attention,
dense, compiled with Adam), then inference on every backend with outputs checked against
keras-torch's, and the file's own training step on every backend. The plugins read the file in
their own tests and tests/equivalence compares the backends in `make test`; this repeats that
through the collector, so it is `make test-full`'s."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.cli.common import load_manifests

SAVE = Path(__file__).resolve().parents[1] / "equivalence" / "keras_model_file.py"
AGENTS = ("keras-torch", "keras-jax", "keras-tf")

pytestmark = pytest.mark.full


def test_a_keras_file_infers_alike_and_trains_on_every_backend(tmp_path: Path, isolated_store):
    manifest = load_manifests(None)["keras-torch"]
    env = environment_for(manifest)
    env.ensure()
    model = tmp_path / "varied.keras"
    subprocess.run(
        [str(env.python), str(SAVE), "save", str(model)],
        env={**os.environ, **manifest.env},  # KERAS_BACKEND=torch
        check=True,
        timeout=600,
    )
    out = tmp_path / "run"
    done = collector(
        "run",
        "--model",
        str(model),
        "--agents",
        ",".join(AGENTS),
        "--phases",
        "train,infer",
        "--batch-sizes",
        "1,8",
        "--min-seconds",
        "0.2",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}, rows[["agent", "phase", "error"]]
    infer = rows[rows["phase"] == "infer"]
    assert set(infer["agent"]) == set(AGENTS) and set(infer["outputs_reference"]) == {AGENTS[0]}
    assert infer["outputs_match"].all(), infer[["agent", "outputs_note"]]
    train = rows[rows["phase"] == "train"]
    assert set(train["agent"]) == set(AGENTS)
    assert train["outputs_match"].isna().all()
    assert train["outputs_note"].str.contains("a training step changes the weights").all()
