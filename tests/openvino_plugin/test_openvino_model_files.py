"""The openvino plugin's capability "model_files" (protocol 1.7), in the openvino-cpu
environment, on ONNX files this test writes with onnx.helper: the signature OpenVINO reads
(open axes None, as InspectModel sends them: -1), a cell reshaped to its input shapes whose
outputs are numpy's computation of the same graph, the ONNX graph's output names, a
truncated file rejected in one line, and a profile of a file's cell."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fwbench.agent.v1 import agent_pb2
from fwbench.openvino_plugin.plugin import OpenVinoPlugin
from fwbench.runtime import model_files
from fwbench.runtime.model_files import ModelRejected, ModelRequest
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.profiling import profile_steps
from fwbench.spec.catalogue import WorkloadDef
from fwbench.spec.model_files import MAX_BATCH_SIZE, TensorInfo

RNG = np.random.default_rng(7)
CONV_W = RNG.standard_normal((4, 1, 3, 3)).astype(np.float32)
CONV_B = RNG.standard_normal(4).astype(np.float32)
FC_W = (RNG.standard_normal((5, 4 * 8 * 8)) * 0.1).astype(np.float32)
POOLED_FC_W = RNG.standard_normal((5, 4)).astype(np.float32)
FC_B = RNG.standard_normal(5).astype(np.float32)


@pytest.fixture(scope="module")
def plugin() -> OpenVinoPlugin:
    return OpenVinoPlugin(PluginContext(device="cpu"))


def _write(path: Path, nodes: list[onnx.NodeProto], x_shape: list, inits: dict) -> Path:
    graph = helper.make_graph(
        nodes,
        path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 5])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(
        graph, producer_name="fwbench-test", opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)
    return path


def _conv_relu(flatten: str) -> list[onnx.NodeProto]:
    return [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], [flatten]),
    ]


@pytest.fixture(scope="module")
def conv_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Conv 3x3 (padding 1) + Relu + Flatten + Gemm: x (batch, 1, 8, 8) -> y (batch, 5)."""
    nodes = [
        *_conv_relu("r"),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]
    inits = {"cw": CONV_W, "cb": CONV_B, "fw": FC_W, "fb": FC_B}
    path = tmp_path_factory.mktemp("onnx") / "conv_relu_gemm.onnx"
    return _write(path, nodes, ["batch", 1, 8, 8], inits)


@pytest.fixture(scope="module")
def pooled_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same with an open height, averaged away before the Gemm: x (batch, 1, height, 8)."""
    nodes = [
        *_conv_relu("r"),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1),
    ]
    inits = {"cw": CONV_W, "cb": CONV_B, "fw": POOLED_FC_W, "fb": FC_B}
    path = tmp_path_factory.mktemp("onnx") / "conv_relu_pool_gemm.onnx"
    return _write(path, nodes, ["batch", 1, "height", 8], inits)


def _conv_relu_numpy(x: np.ndarray) -> np.ndarray:
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))
    conv = np.einsum("ncijkl,ockl->noij", windows, CONV_W) + CONV_B[None, :, None, None]
    return np.maximum(conv, 0.0)


def _spec(path: Path, shape: tuple[int, ...], phase: str = "infer") -> WorkloadSpec:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    model = ModelRequest(str(path), "onnx", digest, (TensorInfo("x", shape, "float32"),))
    workload = WorkloadDef(
        name=f"model:{path.stem}@{digest[:8]}",
        kind="model",
        description="a test's ONNX file",
        item="one item of the model's batch",
        phases=("train", "infer"),
        max_batch_size=MAX_BATCH_SIZE,
        flops_forward="0",
    )
    return WorkloadSpec(workload, phase, shape[0], "float32", {}, 0, 3, "latency", model=model)


def test_the_signature_leaves_the_open_axes_open(plugin, conv_file, pooled_file):
    signature = plugin.inspect_model(str(conv_file), "onnx")
    assert signature.inputs == (TensorInfo("x", (None, 1, 8, 8), "float32"),)
    assert signature.outputs == (TensorInfo("y", (None, 5), "float32"),)
    assert signature.parameters == CONV_W.size + CONV_B.size + FC_W.size + FC_B.size
    assert signature.phases == ("infer",) and "backward" in signature.unsupported_reasons["train"]
    assert signature.details["producer"] == "fwbench-test"
    assert signature.details["opset"] == "ai.onnx:17"
    assert signature.details["read_by"].startswith("openvino 2026.")
    pooled = plugin.inspect_model(str(pooled_file), "onnx")
    assert pooled.inputs == (TensorInfo("x", (None, 1, None, 8), "float32"),)


def test_inspect_model_through_the_runtime_sends_open_axes_as_minus_one(plugin, pooled_file):
    request = agent_pb2.InspectModelRequest(
        model=agent_pb2.ModelFile(path=str(pooled_file), format="onnx")
    )
    message = model_files.inspect(plugin, request)
    assert [list(t.shape) for t in message.inputs] == [[-1, 1, -1, 8]]
    assert [(t.name, t.dtype) for t in message.outputs] == [("y", "float32")]


def test_a_cell_computes_the_graph_on_the_seeds_inputs(plugin, conv_file):
    spec = _spec(conv_file, (2, 1, 8, 8))
    built = plugin.build(spec)
    plugin.synchronize(built.step())
    assert built.outputs is not None
    outputs = built.outputs()
    assert list(outputs) == ["y"]  # the ONNX graph's output name, as ONNX Runtime reports it
    x = spec.model.arrays(spec.seed)["x"]
    expected = _conv_relu_numpy(x).reshape(2, -1) @ FC_W.T + FC_B
    assert outputs["y"].shape == (2, 5) and outputs["y"].dtype == np.float32
    np.testing.assert_allclose(outputs["y"], expected, rtol=1e-4, atol=1e-4)
    extra = built.settings.extra
    assert (built.settings.mode, extra["performance_hint"]) == ("latency", "LATENCY")
    assert extra["inference_precision_hint"] == "f32"


def test_a_second_open_axis_takes_the_cells_shape(plugin, pooled_file):
    spec = _spec(pooled_file, (3, 1, 6, 8))
    outputs = plugin.build(spec).outputs()
    x = spec.model.arrays(spec.seed)["x"]
    expected = _conv_relu_numpy(x).mean(axis=(2, 3)) @ POOLED_FC_W.T + FC_B
    np.testing.assert_allclose(outputs["y"], expected, rtol=1e-4, atol=1e-4)


def test_a_truncated_file_is_rejected_in_one_line(plugin, conv_file, tmp_path):
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(conv_file.read_bytes()[: conv_file.stat().st_size // 2])
    with pytest.raises(ModelRejected) as rejected:
        plugin.inspect_model(str(cut), "onnx")
    text = str(rejected.value)
    assert text.startswith("model: cut.onnx is not a readable onnx model: ") and "\n" not in text
    with pytest.raises(ModelRejected, match=r"cut\.onnx is not a readable onnx model"):
        plugin.build(_spec(cut, (2, 1, 8, 8)))


def test_a_model_file_is_not_trained(plugin, conv_file):
    with pytest.raises(UnsupportedWorkload, match="no backward pass"):
        plugin.build(_spec(conv_file, (2, 1, 8, 8), phase="train"))


def test_a_model_file_cell_profiles_on_its_own_compilation(plugin, conv_file):
    """The profile (protocol 1.10) runs a second compilation of the file, reshaped as the
    cell's; the cell's own request computes the same outputs afterwards."""
    spec = _spec(conv_file, (2, 1, 8, 8))
    built = plugin.build(spec)
    assert built.outputs is not None
    before = built.outputs()["y"]
    result = profile_steps(
        plugin, "openvino", built.step, 2, "", threading.Event(), lambda *_: None
    )
    assert not result.not_profiled, result.not_profiled
    classes = {o.name: o.op_class for o in result.operations}
    assert classes.get("Convolution") == "convolution" and "" not in classes.values(), classes
    np.testing.assert_array_equal(built.outputs()["y"], before)
