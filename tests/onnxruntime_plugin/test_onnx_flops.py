"""The runtime's count of an ONNX graph's FLOPs (fwbench/runtime/onnx_flops.py), in the
onnxruntime-cpu environment: on the plugin's own graphs of the catalogue (operators, CNNs with
grouped and depthwise convolutions, an LSTM) it gives exactly the catalogue's formula, at a
batch size the graph leaves open; a counted node whose shapes stay unknown is refused naming
it, never counted as 0."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from fwbench.onnxruntime_plugin import generation_graphs, models
from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.runtime import onnx_flops
from fwbench.spec import load_catalogue
from fwbench.spec.model_files import TensorInfo

CATALOGUE = load_catalogue()
BATCH = 3
SMALL = {"layers": 2, "hidden": 16, "heads": 4, "vocab": 40, "context": 24, "seq_len": 7}


@pytest.mark.parametrize(
    ("workload", "given"),
    [
        ("gemm", {"m": 64, "n": 48, "k": 32}),
        ("conv2d", {}),
        ("lenet", {}),
        ("resnet18", {"image_size": 32}),
        ("mobilenet_v2", {"image_size": 32}),
        ("lstm", {"seq_len": 5}),
    ],
)
def test_the_count_of_a_catalogue_graph_is_the_catalogues_formula(
    tmp_path: Path, workload: str, given: dict[str, int]
) -> None:
    params = CATALOGUE.get(workload).resolve_params(given)
    graph = models.cell_graph(workload, params, BATCH, seed=0)
    path = tmp_path / f"{workload}.onnx"
    path.write_bytes(graph.serialized)
    inputs = [
        TensorInfo(name, tuple(BATCH if isinstance(d, str) else d for d in shape), "float32")
        for name, (shape, _) in graph.inputs.items()
    ]
    counted = onnx_flops.count(str(path), inputs)
    expected = CATALOGUE.get(workload).forward_flops_per_item(params) * BATCH
    assert counted.flops == pytest.approx(expected, rel=1e-12)
    assert counted.counter.startswith("ONNX graph: Conv,") and onnx.__version__ in counted.counter


def _count(tmp_path: Path, serialized: bytes, shapes: dict[str, tuple[int, ...]]) -> float:
    path = tmp_path / "graph.onnx"
    path.write_bytes(serialized)
    inputs = [TensorInfo(name, shape, "float32") for name, shape in shapes.items()]
    return onnx_flops.count(str(path), inputs).flops


@pytest.mark.parametrize(
    ("workload", "causal"), [("attention", 0), ("attention", 1), ("bert", 0), ("gpt", 0)]
)
def test_a_transformer_graph_counts_the_catalogues_formula_and_its_masked_half(
    tmp_path: Path, workload: str, causal: int
) -> None:
    """The catalogue counts a causal row's keys up to itself; the graph's MatMuls compute
    every (query, key) pair, the masked half too: 2 x head_dim x s(s-1)/2 per product more."""
    params = CATALOGUE.get(workload).resolve_params(
        {"heads": 4, "seq_len": 7, "head_dim": 4, "causal": causal}
        if workload == "attention"
        else {k: v for k, v in SMALL.items() if k in CATALOGUE.get(workload).params}
    )
    graph = tg.cell_graph(workload, params, BATCH, seed=0)
    shapes = {
        name: tuple(BATCH if isinstance(d, str) else d for d in shape)
        for name, (shape, _) in graph.inputs.items()
    }
    counted = _count(tmp_path, graph.serialized, shapes)
    s = params["seq_len"]
    if workload == "attention":
        masked = causal * 2 * 2 * params["heads"] * params["head_dim"] * s * (s - 1) / 2
    else:
        masked = (workload == "gpt") * params["layers"] * 2 * 2 * params["hidden"] * s * (s - 1) / 2
    expected = CATALOGUE.get(workload).forward_flops_per_item(params) + masked
    assert counted == pytest.approx(expected * BATCH, rel=1e-12)


def test_the_generation_graphs_are_counted(tmp_path: Path) -> None:
    """The decode graph: every weight's products for one token, and attention over the whole
    cache (length + the token's own key; the own value's product is an elementwise Mul)."""
    params = {**SMALL, "prompt_len": 5, "new_tokens": 4}
    graphs = generation_graphs.build_generation_graphs(params, BATCH, 5)
    shape, h, layers = graphs.shape, SMALL["hidden"], SMALL["layers"]
    decode = {"token": (BATCH, 1), "position": (1,)}
    for layer in range(layers):
        decode[generation_graphs.past_key(layer)] = shape.key(shape.length)
        decode[generation_graphs.past_value(layer)] = shape.value(shape.length)
    attention = 2 * h * (shape.length + 1) + 2 * h * shape.length
    per_token = layers * (24 * h * h + attention) + 2 * h * SMALL["vocab"]
    assert _count(tmp_path, graphs.decode, decode) == BATCH * per_token
    prefill = _count(tmp_path, graphs.prefill, {"tokens": (BATCH, 5)})
    dense = layers * 24 * h * h * 5 + 2 * h * SMALL["vocab"]  # the head on the last position
    assert prefill == BATCH * (dense + layers * 4 * h * 5 * 5)


def test_a_counted_node_of_unknown_shape_is_named_not_counted_as_zero(tmp_path: Path) -> None:
    """A MatMul whose second operand is a graph input of open shape that the cell does not
    fix (an input the count was not given): its output's shape stays open."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="the_matmul")],
        "open",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
            helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, "n"]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    path = tmp_path / "open.onnx"
    onnx.save(helper.make_model(graph), path)
    with pytest.raises(
        ValueError, match="node 'the_matmul' \\(MatMul\\): the shape of 'y' is not known"
    ):
        onnx_flops.count(str(path), [TensorInfo("x", (2, 4), "float32")])
    with pytest.raises(ValueError, match="the graph has no input 'z'"):
        onnx_flops.count(str(path), [TensorInfo("z", (2, 4), "float32")])
    both = [TensorInfo("x", (2, 4), "float32"), TensorInfo("w", (4, 5), "float32")]
    assert onnx_flops.count(str(path), both).flops == 2 * 2 * 5 * 4


def test_a_graph_with_a_subgraph_says_why_it_has_no_count(tmp_path: Path) -> None:
    """How often a Loop's body runs is the data's to say: no count, and the node named."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, [])],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "c"], [], name="the_loop", body=body)],
        "looped",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [],
    )
    path = tmp_path / "looped.onnx"
    onnx.save(helper.make_model(graph), path)
    counted = onnx_flops.count(str(path), [])
    assert counted.flops == 0 and counted.counter.startswith("ONNX graph:")
    assert counted.not_counted.startswith("node 'the_loop' (Loop) runs a subgraph")
