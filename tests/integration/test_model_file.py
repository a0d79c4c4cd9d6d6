"""`collector run --model` end to end with agents whose difference the test controls: fake
agents (tests/runtime/fake_plugin.py) that "read" a model file of JSON under an ONNX name, one
slower by a known factor, one whose outputs are off by a known amount, one that reads no model
files. The run's first reader computes the reference outputs before any timing; every
inference row says how far its outputs are; a row whose outputs differ stays out of verdicts;
an agent that does not read the format gets an unsupported row saying so. Then every bad input
of issue #56 exits 2 with one line, before any cell is timed, with nothing stored as ok.
Real frameworks read real files in tests/integration/test_model_file_runtimes.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

from fwbench.spec import model_files

pytestmark = pytest.mark.timing  # its verdict comes from measured (slept) times

READS = {"FAKE_MODEL_FORMATS": "onnx", "FAKE_MODEL_MICROS": "4000"}
AGENTS = {
    "ref": {**READS, "FAKE_MODEL_MODES": "eager,compiled"},
    "slow": {**READS, "FAKE_STEP_SCALE": "1.5"},
    "off": {**READS, "FAKE_OUTPUT_OFFSET": "0.5"},
    "blind": {},
}
MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}


def _model(folder: Path, text: object, name: str = "net.onnx") -> Path:
    path = folder / name
    path.write_text(json.dumps(text))
    return path


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The agents of every test here, their environments made once."""
    return write_fake_agents(tmp_path_factory.mktemp("agents"), AGENTS)


def _run(tmp_path: Path, manifests: Path, *args: str):
    return collector(
        "run",
        "--manifests",
        str(manifests),
        "--scrape-interval",
        "0",
        "--interference-threshold",
        "100",  # the steps sleep: a busy host does not change them
        *args,
        cwd=tmp_path,
    )


def test_a_model_file_is_measured_checked_and_compared(
    tmp_path: Path, isolated_store, manifests: Path
):
    model = _model(tmp_path, MODEL)
    out = tmp_path / "run"
    done = _run(
        tmp_path,
        manifests,
        "--model",
        str(model),
        "--agents",
        ",".join(AGENTS),
        "--batch-sizes",
        "1,4",
        "--min-seconds",
        "0.1",
        "--until-decided",
        "--baseline",
        "ref",
        "--budget",
        "3m",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    workload = model_files.workload_name(model.resolve(), model_files.digest(model))
    assert set(rows["workload"]) == {workload}
    assert set(rows["phase"]) == {"infer"}  # a model's run is inference unless asked
    ok = rows[rows["status"] == "ok"]
    assert set(ok["agent"]) == {"ref", "slow", "off"}
    assert set(ok["model_format"]) == {"onnx"} and set(ok["outputs_reference"]) == {"ref"}
    assert ok["model_sha256"].eq(model_files.digest(model)).all()
    assert ok["model_parameters"].eq(1).all()  # as the fake's signature counts them
    assert ok["model_bytes"].eq(model.stat().st_size).all()
    matching = ok[ok["agent"].isin(["ref", "slow"])]
    assert matching["outputs_match"].all() and matching["output_max_abs_diff"].eq(0).all()
    off = ok[ok["agent"] == "off"]
    assert not off["outputs_match"].any()
    assert off["output_max_abs_diff"].sub(0.5).abs().lt(1e-6).all()
    assert off["outputs_note"].str.contains("beyond float32's tolerance").all()
    # The reference's counter (the fake's: 2 FLOPs an input element, 3 an item) charged to
    # every agent's row of the file, its name with it.
    assert ok["flops_per_item"].eq(6).all() and set(ok["flops_counter"]) == {
        "ref: fake counter 1.0"
    }
    expected = ok["items_per_second"] * 6 / 1e9
    assert (ok["gflops_per_second"] - expected).abs().le(expected * 1e-9).all()
    blind = rows[rows["agent"] == "blind"]
    assert set(blind["status"]) == {"unsupported"}
    assert blind["error"].str.contains("reads no onnx model files").all()
    decided = json.loads((out / "run.json").read_text())
    assert decided["options"]["model"]["sha256"] == model_files.digest(model)
    verdicts = {(d["agent"], d["key"][2]): d for d in decided["until_decided"]["decisions"]}
    assert {verdicts[("slow", b)]["verdict"] for b in (1, 4)} == {"slower"}, verdicts
    assert all(verdicts[("off", b)]["verdict"] == "undecided" for b in (1, 4)), verdicts
    compared = collector("compare", str(out), "--baseline", "ref", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert "outputs differ" in compared.stdout
    table = collector("results", str(out), cwd=tmp_path)
    assert (
        "≠ off model:net@" in table.stdout and "outputs within tolerance of ref's" in table.stdout
    )


def test_modes_all_runs_each_mode_an_agent_runs_model_files_in(
    tmp_path: Path, isolated_store, manifests: Path
):
    """Describe.model_files (protocol 1.8) says each agent's modes for model files: --modes all
    runs every one, a named mode runs where it is offered and is unsupported elsewhere."""
    model = _model(tmp_path, MODEL)
    for modes in ("all", "compiled"):
        out = tmp_path / modes
        done = _run(
            tmp_path,
            manifests,
            *("--model", str(model), "--agents", "ref,slow", "--batch-sizes", "1"),
            *("--min-seconds", "0.05", "--modes", modes, "--out", str(out)),
        )
        assert done.returncode == 0, done.stderr
        rows = pd.read_parquet(out / "results.parquet")
        found = sorted(zip(rows["agent"], rows["mode"], rows["status"], strict=True))
        if modes == "all":
            assert found == [
                ("ref", "compiled", "ok"),
                ("ref", "eager", "ok"),
                ("slow", "eager", "ok"),
            ]
        else:
            assert found == [("ref", "compiled", "ok"), ("slow", "compiled", "unsupported")]
            slow = rows[rows["agent"] == "slow"]
            assert slow["error"].str.contains("offers none of the modes compiled").all()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing", "no such file or folder"),
        ("suffix", "cannot tell its format"),
        ("not_zip", "not a Keras 3 model file"),
        ("unreadable", "is not a readable onnx model"),
        ("nobody", "no agent of this run reads onnx files"),
        ("open", "give it with --input x="),
        ("fixed", "fixes its batch at 2: give --batch-sizes 2"),
        ("bad_input", "--input 'x=3xZ'"),
        ("unknown_input", "--input y: the model has no such input"),
    ],
)
def test_bad_input_is_refused_in_one_line_before_any_timing(
    tmp_path: Path, isolated_store: Path, manifests: Path, case: str, expected: str
):
    agents, extra = "ref", []
    open_axes = {**MODEL, "inputs": [{**MODEL["inputs"][0], "shape": [None, None]}]}
    fixed = {**MODEL, "inputs": [{**MODEL["inputs"][0], "shape": [2, 3]}]}
    text, name = {"open": (open_axes, "net.onnx"), "fixed": (fixed, "net.onnx")}.get(
        case, (MODEL, {"suffix": "net.txt", "not_zip": "net.keras"}.get(case, "net.onnx"))
    )
    model = _model(tmp_path, text, name)
    if case == "missing":
        model = tmp_path / "absent.onnx"
    if case == "unreadable":
        model.write_text(json.dumps(MODEL)[:20])  # the file cut short
    if case == "nobody":
        agents = "blind"
    if case == "bad_input":
        extra = ["--input", "x=3xZ"]
    if case == "unknown_input":
        extra = ["--input", "y=1x3"]
    done = _run(
        tmp_path,
        manifests,
        "--model",
        str(model),
        "--agents",
        agents,
        "--batch-sizes",
        "1,4",
        *extra,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert any(expected in line for line in said), done.stderr
    assert "Traceback" not in done.stderr
    if isolated_store.exists():  # nothing measured, nothing stored as ok
        with sqlite3.connect(isolated_store) as db:
            tables = {r[0] for r in db.execute("select name from sqlite_master")}
            if "results" in tables:
                assert not db.execute("select count(*) from results").fetchone()[0]
