"""The forward FLOPs of an ONNX graph at a cell's input shapes (protocol 1.9's FlopCount), for
the agents that run ONNX files (ONNX Runtime, OpenVINO): ONNX has no counter of its own, so
this counts the nodes that hold a network's arithmetic, from the graph's shapes as ONNX's own
shape inference gives them once the inputs have the cell's shapes:

- Conv: 2 x output elements x (input channels per group x kernel elements);
- ConvTranspose: 2 x input elements x (output channels per group x kernel elements);
- MatMul: 2 x output elements x the shared dimension; Gemm: 2 x M x N x K;
- LSTM, GRU, RNN: 2 x steps x batch x directions x gates x hidden x (input + hidden).

A multiply-add is 2 FLOPs, as the catalogue and PyTorch's FlopCounterMode count; biases,
activations, normalisation and every other node count 0 (as FlopCounterMode counts them). A
graph with a subgraph (If, Loop, Scan) is not counted: how often a subgraph runs is the data's
to say, not the graph's. Where a counted node's shapes are not known
after inference, nothing is counted: ValueError naming the node (a count that silently left
out a convolution would flatter every agent's GFLOP/s). Needs the `onnx` package, imported
when called: an agent whose environment lacks it says so instead of a count."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fwbench.runtime.plugin import FlopCount
from fwbench.spec.model_files import TensorInfo

COUNTED = ("Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN")
SUBGRAPHS = ("If", "Loop", "Scan")
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


def count(path: str, inputs: Sequence[TensorInfo]) -> FlopCount:
    """One forward pass of the file at `inputs` (the cell's full shapes, by name)."""
    try:
        import onnx
    except ImportError:
        return FlopCount(0.0, not_counted="the onnx package is not in this environment")
    model = onnx.load(path, load_external_data=False)  # shapes only: weights stay on disk
    counter = f"ONNX graph: {', '.join(COUNTED)} nodes (onnx {onnx.__version__})"
    nested = next((n for n in model.graph.node if n.op_type in SUBGRAPHS), None)
    if nested is not None:
        why = f"node {nested.name or nested.op_type!r} ({nested.op_type}) runs a subgraph"
        return FlopCount(0.0, counter, f"{why}: how often is the data's to say, not the graph's")
    graph_inputs = {i.name: i for i in model.graph.input}
    for tensor in inputs:
        found = graph_inputs.get(tensor.name)
        if found is None:
            raise ValueError(f"the graph has no input {tensor.name!r}")
        dims = found.type.tensor_type.shape.dim
        del dims[:]
        for size in tensor.shape:
            dims.add().dim_value = int(size or 1)
    inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    shapes = _shapes(inferred.graph)
    flops = sum(_node_flops(node, shapes) for node in inferred.graph.node)
    return FlopCount(float(flops), counter)


def _shapes(graph: Any) -> dict[str, tuple[int, ...] | None]:
    """Every named value's shape: None where a dimension is not a known number."""
    shapes: dict[str, tuple[int, ...] | None] = {}
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = value.type.tensor_type.shape.dim
        known = all(d.HasField("dim_value") for d in dims)
        has_shape = value.type.tensor_type.HasField("shape")
        shapes[value.name] = tuple(int(d.dim_value) for d in dims) if has_shape and known else None
    for initializer in graph.initializer:
        shapes[initializer.name] = tuple(int(d) for d in initializer.dims)
    return shapes


def _node_flops(node: Any, shapes: Mapping[str, tuple[int, ...] | None]) -> int:
    if node.op_type not in COUNTED:
        return 0

    def shape(index: int, of: Iterable[str]) -> tuple[int, ...]:
        names = list(of)
        name = names[index] if index < len(names) else ""
        found = shapes.get(name) if name else None
        if found is None:
            what = node.name or node.op_type
            raise ValueError(f"node {what!r} ({node.op_type}): the shape of {name!r} is not known")
        return found

    attributes = {a.name: a for a in node.attribute}
    if node.op_type == "Conv":
        weight, out = shape(1, node.input), shape(0, node.output)
        return 2 * math.prod(out) * math.prod(weight[1:])
    if node.op_type == "ConvTranspose":
        x, weight = shape(0, node.input), shape(1, node.input)
        return 2 * math.prod(x) * math.prod(weight[1:])
    if node.op_type == "MatMul":
        a, out = shape(0, node.input), shape(0, node.output)
        return 2 * math.prod(out) * a[-1]
    if node.op_type == "Gemm":
        a, out = shape(0, node.input), shape(0, node.output)
        trans_a = attributes["transA"].i if "transA" in attributes else 0
        return 2 * math.prod(out) * (a[0] if trans_a else a[1])
    x, weight = shape(0, node.input), shape(1, node.input)  # LSTM, GRU, RNN
    layout = attributes["layout"].i if "layout" in attributes else 0
    steps, batch = (x[1], x[0]) if layout else (x[0], x[1])
    directions, gates_hidden, inputs = weight
    hidden = gates_hidden // _GATES[node.op_type]
    return 2 * steps * batch * directions * gates_hidden * (inputs + hidden)
