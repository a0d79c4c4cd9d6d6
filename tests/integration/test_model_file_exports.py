"""Exported programs on the framework agents that read them (`collector run --model`): a
`.jax` serialized by jax.export in the jax-cpu environment (a jitted two-layer function, the
batch symbolic) measured on jax-cpu and its A/A twin; and a `.pt2` saved by torch.export in
the torch-cpu environment (a convolution, BatchNorm in eval, a dense layer, the batch a
torch.export.Dim) by docs/your-model.md's `--export` command: torch-cpu runs it, writes it as
ONNX with torch.onnx.export, and onnxruntime-cpu and openvino-cpu run that export, every
inference row's outputs checked against torch-cpu's; and a Keras file of varied layers
(tests/equivalence/keras_model_file.py's, a GELU included) with `--export` on keras-tf, which
writes it as a SavedModel that tf-eigen runs and as ONNX (tf2onnx) that onnxruntime-cpu runs.
The plugins' own tests check the outputs against the frameworks' (tests/torch_plugin,
tests/jax_plugin, tests/keras_plugin, tests/tf_plugin); test_model_file_keras.py runs the
issue's seven agents in `make test-full`."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pandas as pd
from collector_cli import collector
from test_model_file_keras import saved_keras_file

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.cli.common import load_manifests
from fwbench.spec import model_files

REPO = Path(__file__).resolve().parents[2]

WRITE_PT2 = """
import sys
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm = nn.BatchNorm2d(8)
        self.dense = nn.Linear(8, 10)

    def forward(self, image):
        return self.dense(torch.relu(self.norm(self.conv(image))).mean((2, 3)))

torch.manual_seed(0)
batch = torch.export.Dim("batch", min=1, max=1024)
example = (torch.zeros(2, 3, 16, 16),)
program = torch.export.export(Net().eval(), example, dynamic_shapes={"image": {0: batch}})
torch.export.save(program, sys.argv[1])
"""

WRITE_JAX = """
import sys
import jax
import jax.numpy as jnp
import numpy as np
from jax import export

rng = np.random.default_rng(0)
w1 = rng.standard_normal((64, 32)).astype(np.float32) * 0.2
w2 = rng.standard_normal((32, 10)).astype(np.float32) * 0.2

def predict(x):
    return jax.nn.softmax(jnp.tanh(x @ w1) @ w2, axis=-1)

images = jax.ShapeDtypeStruct(export.symbolic_shape("b, 64"), jnp.float32)
open(sys.argv[1], "wb").write(export.export(jax.jit(predict))(images).serialize())
"""


def _write(agent: str, script: str, path: Path) -> Path:
    env = environment_for(load_manifests(None)[agent])
    env.ensure()
    subprocess.run([str(env.python), "-c", script, str(path)], check=True, timeout=300)
    return path


def test_an_exported_function_runs_on_its_framework(tmp_path: Path, isolated_store):
    model = _write("jax-cpu", WRITE_JAX, tmp_path / "net.jax")
    out = tmp_path / "run"
    done = collector(
        "run",
        "--model",
        str(model),
        "--agents",
        "jax-cpu",
        "--aa",
        "jax-cpu",
        "--batch-sizes",
        "1,4",
        "--min-seconds",
        "0.1",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]
    assert set(rows["agent"]) == {"jax-cpu", "jax-cpu#2"}
    assert set(rows["batch_size"]) == {1, 4}
    assert rows["outputs_match"].all(), rows[["agent", "outputs_note"]]
    assert rows["output_max_abs_diff"].le(1e-6).all()
    assert set(rows["outputs_reference"]) == {"jax-cpu"}
    # XLA's count: the two products' multiply-adds and more (the elementwise arithmetic).
    assert rows["flops_counter"].str.startswith("jax-cpu: XLA cost analysis (jax ").all()
    assert rows["flops_per_item"].ge(2 * (64 * 32 + 32 * 10)).all()
    assert "net@" in done.stdout


def _documented_export() -> list[str]:
    """docs/your-model.md's `--export` command, as its words."""
    page = (REPO / "docs" / "your-model.md").read_text()
    blocks = [b.split("```", 1)[0] for b in page.split("```bash\n")[1:]]
    return shlex.split(next(b for b in blocks if "--export" in b).strip())


def test_the_documented_export_runs_a_program_on_torch_and_its_onnx_on_two_runtimes(
    tmp_path: Path, isolated_store
):
    words = _documented_export()
    assert words[:2] == ["collector", "run"] and "net.pt2" in words
    _write("torch-cpu", WRITE_PT2, tmp_path / "net.pt2")
    out = tmp_path / "run"
    done = collector(*words[1:], "--min-seconds", "0.1", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = " ".join((done.stdout + done.stderr).split())
    assert "onnx export by torch-cpu: torch.onnx.export (dynamo) torch" in said
    assert "its outputs on onnxruntime-cpu match the reference" in said
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]
    assert set(rows["agent"]) == {"torch-cpu", "onnxruntime-cpu", "openvino-cpu"}
    assert rows["workload"].nunique() == 1 and set(rows["batch_size"]) == {1, 4}
    assert rows["outputs_match"].all(), rows[["agent", "outputs_note"]]
    assert rows["output_max_abs_diff"].le(1e-4).all()
    assert set(rows["outputs_reference"]) == {"torch-cpu"}
    onnx = rows[rows["agent"] != "torch-cpu"]
    exported = out / "models" / "net.onnx"
    assert set(onnx["model_format"]) == {"onnx"}
    assert set(onnx["model_sha256"]) == {model_files.digest(exported)}
    assert onnx["model_export"].str.startswith("torch-cpu: torch.onnx.export").all()
    assert rows.loc[rows["agent"] == "torch-cpu", "model_export"].isna().all()
    # Every agent's row charged torch-cpu's FlopCounterMode count: the convolution's and the
    # dense layer's multiply-adds, an item.
    counter = "torch-cpu: torch.utils.flop_counter.FlopCounterMode (torch "
    assert rows["flops_counter"].str.startswith(counter).all()
    assert rows["flops_per_item"].eq(2 * (16 * 16 * 8) * (3 * 3 * 3) + 2 * 10 * 8).all()
    assert rows["gflops_per_second"].gt(0).all()


def test_keras_tf_exports_a_savedmodel_and_onnx_that_other_runtimes_run(
    tmp_path: Path, isolated_store
):
    model = saved_keras_file(tmp_path, "keras-tf")
    out = tmp_path / "run"
    agents = ("keras-tf", "tf-eigen", "onnxruntime-cpu")
    done = collector(
        "run",
        "--model",
        str(model),
        "--export",
        "--agents",
        ",".join(agents),
        "--batch-sizes",
        "1,4",
        "--min-seconds",
        "0.1",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]
    assert rows["outputs_match"].all(), rows[["agent", "outputs_note"]]
    made = rows.groupby("agent")[["model_format", "model_export"]].first()
    assert made.loc["tf-eigen", "model_format"] == "savedmodel"
    assert made.loc["onnxruntime-cpu", "model_format"] == "onnx"
    assert made.loc["onnxruntime-cpu", "model_export"].startswith("keras-tf: tf2onnx")
    assert (out / "models" / "varied.savedmodel" / "saved_model.pb").is_file()
    # Its LSTM is a while loop, whose body TensorFlow's profiler counts once: no count.
    said = set(rows["flops_counter"])
    assert len(said) == 1 and "not counted: the graph has a loop" in said.pop()
    assert rows["flops_per_item"].isna().all()
