"""A real ONNX file on the real runtimes that read it (`collector run --model`): the graph is
written with onnx.helper in the onnxruntime-cpu environment (a convolution, a ReLU, a pooling
and a dense layer, the batch axis left open), measured on onnxruntime-cpu and its A/A twin,
each inference row's outputs checked against the reference agent's; torch-cpu reads no ONNX
files and says so on its row."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pandas as pd
from collector_cli import collector

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.cli.common import load_manifests

WRITE_GRAPH = """
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(0)
weights = {
    "conv_w": rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.2,
    "conv_b": rng.standard_normal(8).astype(np.float32) * 0.1,
    "dense_w": rng.standard_normal((8, 5)).astype(np.float32) * 0.3,
    "dense_b": rng.standard_normal(5).astype(np.float32) * 0.1,
}
nodes = [
    helper.make_node("Conv", ["image", "conv_w", "conv_b"], ["c"], pads=[1, 1, 1, 1]),
    helper.make_node("Relu", ["c"], ["r"]),
    helper.make_node("GlobalAveragePool", ["r"], ["p"]),
    helper.make_node("Flatten", ["p"], ["f"]),
    helper.make_node("Gemm", ["f", "dense_w", "dense_b"], ["scores"]),
]
graph = helper.make_graph(
    nodes,
    "tiny",
    [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 16, 16])],
    [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 5])],
    [numpy_helper.from_array(value, name) for name, value in weights.items()],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
"""


def _onnx_file(folder: Path) -> Path:
    env = environment_for(load_manifests(None)["onnxruntime-cpu"])
    env.ensure()
    path = folder / "tiny.onnx"
    subprocess.run([str(env.python), "-c", WRITE_GRAPH, str(path)], check=True, timeout=300)
    return path


def test_an_onnx_file_runs_on_the_runtimes_that_read_it(tmp_path: Path, isolated_store):
    model = _onnx_file(tmp_path)
    out = tmp_path / "run"
    done = collector(
        "run",
        "--model",
        str(model),
        "--agents",
        "onnxruntime-cpu,torch-cpu",
        "--aa",
        "onnxruntime-cpu",
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
    ok = rows[rows["status"] == "ok"]
    assert set(ok["agent"]) == {"onnxruntime-cpu", "onnxruntime-cpu#2"}
    assert set(ok["batch_size"]) == {1, 8}
    assert ok["outputs_match"].all(), ok[["agent", "outputs_note"]]
    assert ok["output_max_abs_diff"].le(1e-5).all()
    assert set(ok["outputs_reference"]) == {"onnxruntime-cpu"}
    torch = rows[rows["agent"] == "torch-cpu"]
    assert set(torch["status"]) == {"unsupported"}
    assert torch["error"].str.contains("reads no onnx model files").all()
    assert "tiny@" in done.stdout  # the summary names the model's cells
