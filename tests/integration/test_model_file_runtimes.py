"""A real ONNX file on the real runtimes that read it, by docs/your-model.md's own command:
the graph is written with onnx.helper in the onnxruntime-cpu environment (a convolution, a
ReLU, a pooling and a dense layer, the batch axis left open), measured on onnxruntime-cpu
(the reference) and openvino-cpu, each inference row's outputs checked against the
reference's; torch-cpu reads no ONNX files and says so on its row."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pandas as pd
from collector_cli import collector

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.cli.common import load_manifests

REPO = Path(__file__).resolve().parents[2]

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


def _documented_command() -> list[str]:
    """docs/your-model.md's first command, as its words."""
    page = (REPO / "docs" / "your-model.md").read_text()
    block = page.split("```bash\n", 1)[1].split("```", 1)[0]
    return shlex.split(block.strip())


def test_the_documented_onnx_command_runs_on_the_runtimes_that_read_it(
    tmp_path: Path, isolated_store
):
    words = _documented_command()
    assert words[:2] == ["collector", "run"] and "tiny.onnx" in words
    _onnx_file(tmp_path)  # tiny.onnx, where the command runs
    out = tmp_path / "run"
    done = collector(*words[1:], "--min-seconds", "0.2", "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    ok = rows[rows["status"] == "ok"]
    assert set(ok["agent"]) == {"onnxruntime-cpu", "openvino-cpu"}
    assert set(ok["batch_size"]) == {1, 8}
    assert ok["outputs_match"].all(), ok[["agent", "outputs_note"]]
    assert ok["output_max_abs_diff"].le(1e-4).all()
    assert set(ok["outputs_reference"]) == {"onnxruntime-cpu"}
    # The graph's count (runtime/onnx_flops.py) by the reference, on both runtimes' rows: the
    # convolution's and the Gemm's multiply-adds, an item; the roofline's intensity with it.
    assert ok["flops_counter"].str.startswith("onnxruntime-cpu: ONNX graph: Conv,").all()
    assert ok["flops_per_item"].eq(2 * (16 * 16 * 8) * (3 * 3 * 3) + 2 * 8 * 5).all()
    assert ok["arithmetic_intensity"].gt(0).all()
    torch = rows[rows["agent"] == "torch-cpu"]
    assert set(torch["status"]) == {"unsupported"}
    assert torch["error"].str.contains("reads no onnx model files").all()
    assert "tiny@" in done.stdout  # the summary names the model's cells
