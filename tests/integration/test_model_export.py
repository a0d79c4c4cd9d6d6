"""`collector run --model FILE --export` end to end with fake agents whose exports the test
controls (tests/runtime/fake_plugin.py: FAKE_EXPORT_FORMATS writes the JSON "model" under the
new format's name with its inputs renamed; FAKE_EXPORT_FACTOR makes it compute otherwise;
FAKE_EXPORT_FAILS makes the exporter fail). The agent that reads the user's file writes the
format another agent reads into the run folder, the collector checks it against the reference
before anything is timed and says so, and the other agent's rows run the export, naming it.
Real exporters (Keras to SavedModel and ONNX, torch.export to ONNX) run in
tests/integration/test_model_file_exports.py."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

from fwbench.spec import model_files

READS = {"FAKE_MODEL_FORMATS": "onnx", "FAKE_MODEL_MICROS": "2000"}
WRITES = {**READS, "FAKE_EXPORT_FORMATS": "jax_export"}
AGENTS = {
    "exp": WRITES,
    "exp-off": {**WRITES, "FAKE_EXPORT_FACTOR": "1.5"},
    "exp-fails": {**WRITES, "FAKE_EXPORT_FAILS": "1"},
    "jx": {"FAKE_MODEL_FORMATS": "jax_export", "FAKE_MODEL_MICROS": "2000"},
    "sm": {"FAKE_MODEL_FORMATS": "savedmodel"},
}
MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_agents(tmp_path_factory.mktemp("agents"), AGENTS)


def _run(tmp_path: Path, manifests: Path, agents: str, *args: str):
    model = tmp_path / "net.onnx"
    model.write_text(json.dumps(MODEL))
    return collector(
        "run",
        "--manifests",
        str(manifests),
        "--scrape-interval",
        "0",
        "--interference-threshold",
        "100",
        "--model",
        str(model),
        "--agents",
        agents,
        "--batch-sizes",
        "1,4",
        "--min-seconds",
        "0.1",
        "--out",
        str(tmp_path / "run"),
        *args,
        cwd=tmp_path,
    )


def test_an_export_is_made_checked_and_measured(tmp_path: Path, isolated_store, manifests: Path):
    done = _run(tmp_path, manifests, "exp,jx,sm", "--export")
    assert done.returncode == 0, done.stderr
    words = " ".join((done.stdout + done.stderr).split())
    assert "jax_export export by exp: fake-exporter 1.0 (net.jax): its outputs on jx match" in words
    out = tmp_path / "run"
    exported = out / "models" / "net.jax"
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    assert rows.loc["exp", "status"].eq("ok").all() and rows.loc["jx", "status"].eq("ok").all()
    assert set(rows.loc["jx", "model_format"]) == {"jax_export"}
    assert set(rows.loc["jx", "model_sha256"]) == {model_files.digest(exported)}
    assert set(rows.loc["jx", "model_export"]) == {"exp: fake-exporter 1.0"}
    assert rows.loc["exp", "model_export"].isna().all()  # the user's own file
    assert rows.loc["jx", "outputs_match"].all() and set(rows["outputs_reference"].dropna()) == {
        "exp"
    }
    assert set(rows.loc["sm", "status"]) == {"unsupported"}
    assert rows.loc["sm", "error"].str.contains("reads no onnx/jax_export model files").all()
    assert json.loads((out / "run.json").read_text())["options"]["model"]["export"] is True
    # Both rows of a cell are one workload: compare sets them side by side.
    assert rows["workload"].nunique() == 1


def test_an_export_that_computes_otherwise_is_said_and_kept_out(
    tmp_path: Path, isolated_store, manifests: Path
):
    done = _run(tmp_path, manifests, "exp-off,jx", "--export")
    assert done.returncode == 0, done.stderr
    assert "DIFFER from the reference at batch 1" in " ".join((done.stdout + done.stderr).split())
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet").set_index("agent")
    assert not rows.loc["jx", "outputs_match"].any()
    assert rows.loc["exp-off", "outputs_match"].all()


@pytest.mark.parametrize(
    ("agents", "export", "expected", "code"),
    [
        ("exp,jx", False, "--export makes jax_export with exp", 0),
        ("exp-fails,jx", True, "exporter failed on net.onnx: ValueError: the fake exporter", 2),
    ],
)
def test_without_export_or_with_a_failing_exporter(
    tmp_path: Path,
    isolated_store,
    manifests: Path,
    agents: str,
    export: bool,
    expected: str,
    code: int,
):
    done = _run(tmp_path, manifests, agents, *(["--export"] if export else []))
    assert done.returncode == code, (done.stdout, done.stderr)
    models = tmp_path / "run" / "models"
    assert not models.exists() or not any(models.iterdir())  # nothing left half-written
    if code == 0:
        rows = pd.read_parquet(tmp_path / "run" / "results.parquet").set_index("agent")
        assert set(rows.loc["jx", "status"]) == {"unsupported"}
        assert rows.loc["jx", "error"].str.contains(expected, regex=False).all()
    else:
        assert expected in " ".join(done.stderr.split()) and "Traceback" not in done.stderr


def test_export_without_a_model_is_refused(tmp_path: Path, manifests: Path):
    done = collector(
        "run", "--manifests", str(manifests), "--agents", "exp", "--export", cwd=tmp_path
    )
    assert done.returncode == 2
    assert "--export and --inputs are about --model's file: give --model FILE" in done.stderr
