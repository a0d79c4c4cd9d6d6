"""`collector run --model FILE --inputs SAMPLE.npz` end to end with fake readers that keep what
they fed (tests/runtime/fake_plugin.py's FAKE_DUMP_INPUTS): the reference and every agent feed
the first rows of the user's own arrays, not inputs made from the seed; --batch-sizes defaults
to all of the rows; arrays that cannot be the model's inputs, or too few rows, are one line and
exit 2 before anything is timed. The sample is written by docs/your-model.md's own snippet."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

MODEL = {"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2.0}
ROWS = 5
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each agent's folder of what it fed."""
    return {name: tmp_path_factory.mktemp(f"fed-{name}") for name in ("ref", "other")}


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory, fed: dict[str, Path]) -> Path:
    reads = {"FAKE_MODEL_FORMATS": "onnx", "FAKE_MODEL_MICROS": "2000"}
    agents = {name: {**reads, "FAKE_DUMP_INPUTS": str(folder)} for name, folder in fed.items()}
    return write_fake_agents(tmp_path_factory.mktemp("agents"), agents)


def _run(tmp_path: Path, manifests: Path, *args: str):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "net.onnx").write_text(json.dumps(MODEL))
    return collector(
        "run",
        "--manifests",
        str(manifests),
        "--scrape-interval",
        "0",
        "--model",
        "net.onnx",
        "--agents",
        "ref,other",
        "--min-seconds",
        "0.1",
        "--out",
        str(tmp_path / "run"),
        *args,
        cwd=tmp_path,
    )


def _documented_sample(folder: Path) -> np.ndarray:
    """docs/your-model.md's snippet that writes sample.npz, run as written in `folder`."""
    page = (REPO / "docs" / "your-model.md").read_text()
    blocks = [b.split("```")[0] for b in page.split("```python\n")[1:]]
    snippet = next(b for b in blocks if "sample.npz" in b)
    subprocess.run([sys.executable, "-c", snippet], cwd=folder, check=True, timeout=60)
    with np.load(folder / "sample.npz") as written:
        return written["x"]


def test_every_agent_feeds_the_users_rows(tmp_path: Path, isolated_store, manifests, fed):
    sample = _documented_sample(tmp_path)
    assert sample.shape == (ROWS, 3)
    done = _run(tmp_path, manifests, "--inputs", "sample.npz")
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and set(rows["batch_size"]) == {ROWS}  # all its rows
    assert rows["outputs_match"].all()
    for folder in fed.values():
        with np.load(folder / f"fed-{ROWS}.npz") as kept:
            assert np.array_equal(kept["x"], sample)
    record = json.loads((tmp_path / "run" / "run.json").read_text())["options"]["model"]
    assert record["sample"] == str((tmp_path / "sample.npz").resolve())
    with np.load(tmp_path / "run" / "models" / "inputs.npz") as copy:
        assert np.array_equal(copy["input_0"], sample)
    done = _run(tmp_path / "again", manifests, "--inputs", "../sample.npz", "--batch-sizes", "2")
    assert done.returncode == 0, done.stderr
    with np.load(fed["other"] / "fed-2.npz") as kept:
        assert np.array_equal(kept["x"], sample[:2])  # the first rows


@pytest.mark.parametrize(
    ("arrays", "extra", "said"),
    [
        (
            {"x": np.zeros((ROWS, 3), np.float32)},
            ["--batch-sizes", "8"],
            "holds 5 rows: batch size 8",
        ),
        ({"y": np.zeros((ROWS, 3), np.float32)}, [], "no array 'x' (it holds y"),
        ({"x": np.zeros((ROWS, 3), np.int32)}, [], "array 'x' is int32[5x3], which cannot be"),
        (None, [], "--inputs sample.npz: not a NumPy .npz of arrays"),
    ],
)
def test_inputs_that_cannot_be_fed_are_refused_before_any_timing(
    tmp_path: Path, isolated_store, manifests, arrays, extra, said
):
    if arrays is None:
        (tmp_path / "sample.npz").write_text("x\n1,2,3\n")
    else:
        np.savez(tmp_path / "sample.npz", **arrays)
    done = _run(tmp_path, manifests, "--inputs", "sample.npz", *extra)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert said in " ".join(done.stderr.split()) and "Traceback" not in done.stderr
    assert not (tmp_path / "run" / "results.parquet").exists()
