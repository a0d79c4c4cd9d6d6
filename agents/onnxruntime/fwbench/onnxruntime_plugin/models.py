"""The catalogue's models and operators as ONNX graphs, node for node the networks of
agents/torch/fwbench/torch_plugin/models.py (its module paths name the nodes and its state_dict
names the weights), with the numbers of fwbench.runtime.architectures.

Models take NCHW float32 images (lenet 1x28x28, the others 3 x image_size x image_size) or
int64 token ids (lstm, batch x seq_len) under the input "input", with a symbolic batch axis,
and give "logits" (batch, classes). Operators (gemm, conv2d) take every operand as a graph
input, shapes fixed by the cell, as the torch plugin passes tensors to its op each step.
Dropout and EfficientNet's stochastic depth are the identity in inference and have no node."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from onnx import NodeProto, TensorProto, helper

from fwbench.onnxruntime_plugin.graphs import (
    BATCH_AXIS,
    EXPORTED_FROM,
    OPSET,
    GraphBuilder,
    Init,
    Parameters,
    fan_in_uniform,
    tensor_input,
)
from fwbench.runtime import architectures as arch

MODELS: tuple[str, ...] = arch.MODEL_NAMES
OPS: tuple[str, ...] = ("gemm", "conv2d")
INPUT, OUTPUT = "input", "logits"
# A network: adds its nodes after the input named by the second argument, returns the logits.
Network = Callable[[GraphBuilder, str], str]


@dataclass(frozen=True)
class Graph:
    """A built graph: its serialised ModelProto, the canonical weights it holds, and what its
    inputs and output look like (a model's batch axis is symbolic: BATCH_AXIS)."""

    name: str
    serialized: bytes
    weights: Mapping[str, np.ndarray]
    inputs: Mapping[str, tuple[tuple[int | str, ...], type]]
    output: str
    output_shape: tuple[int | str, ...]
    token_ids_below: int = arch.LSTM_VOCAB_SIZE  # the vocabulary of an int64 input's ids


# ------------------------------------------------------------------------------ the models


def _lenet(b: GraphBuilder, x: str) -> str:
    index, in_ch = 0, 1
    for conv in arch.LENET_CONVS:
        x = b.conv(x, f"features.{index}", in_ch, conv.channels, conv.kernel, padding=conv.padding)
        x = b.max_pool(b.relu(x, f"features.{index + 1}"), f"features.{index + 2}", 2, 2)
        index, in_ch = index + 3, conv.channels
    x = b.node("Flatten", [x], "flatten", axis=1)
    width = math.prod(arch.LENET_FEATURES)
    for i, hidden in enumerate(arch.LENET_HIDDEN):
        x = b.relu(b.linear(x, f"classifier.{2 * i}", width, hidden), f"classifier.{2 * i + 1}")
        width = hidden
    return b.linear(x, f"classifier.{2 * len(arch.LENET_HIDDEN)}", width, arch.NUM_CLASSES["lenet"])


def _conv_bn(
    b: GraphBuilder,
    x: str,
    path: str,
    in_ch: int,
    out_ch: int,
    kernel: int,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
    eps: float = arch.BN_EPS,
    names: tuple[str, str] = ("0", "1"),
) -> str:
    """A bias-free convolution and its BatchNorm, at path.names[0] and path.names[1]."""
    conv = f"{path}{names[0]}"
    x = b.conv(x, conv, in_ch, out_ch, kernel, stride, padding, groups, bias=False)
    return b.batch_norm(x, f"{path}{names[1]}", out_ch, eps)


def _resnet_block(
    b: GraphBuilder, x: str, path: str, block: str, in_ch: int, planes: int, stride: int
) -> tuple[str, int]:
    out_ch = planes * arch.BLOCK_EXPANSION[block]
    identity = x
    if stride != 1 or in_ch != out_ch:
        identity = _conv_bn(b, x, f"{path}.downsample.", in_ch, out_ch, 1, stride)
    p = f"{path}."
    if block == "basic":
        out = _conv_bn(b, x, p, in_ch, planes, 3, stride, 1, names=("conv1", "bn1"))
        out = _conv_bn(
            b, b.relu(out, f"{p}relu"), p, planes, planes, 3, 1, 1, names=("conv2", "bn2")
        )
    else:  # bottleneck, v1.5: the stride on the 3x3 conv
        out = b.relu(_conv_bn(b, x, p, in_ch, planes, 1, names=("conv1", "bn1")), f"{p}relu")
        out = _conv_bn(b, out, p, planes, planes, 3, stride, 1, names=("conv2", "bn2"))
        out = _conv_bn(b, b.relu(out, f"{p}relu"), p, planes, out_ch, 1, names=("conv3", "bn3"))
    return b.relu(b.node("Add", [out, identity], f"{p}add"), f"{p}relu"), out_ch


def _resnet(name: str) -> Network:
    spec = arch.RESNETS[name]

    def build(b: GraphBuilder, x: str) -> str:
        stem = arch.RESNET_STEM_CHANNELS
        x = b.relu(_conv_bn(b, x, "", 3, stem, 7, 2, 3, names=("conv1", "bn1")), "relu")
        x = b.max_pool(x, "maxpool", 3, 2, 1)
        in_ch = stem
        for stage, (width, depth) in enumerate(
            zip(arch.RESNET_STAGE_WIDTHS, spec.depths, strict=True)
        ):
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                path = f"layer{stage + 1}.{i}"
                x, in_ch = _resnet_block(b, x, path, spec.block, in_ch, width, stride)
        return b.linear(b.global_pool_flatten(x, "avgpool"), "fc", in_ch, arch.NUM_CLASSES[name])

    return build


def adaptive_pool_matrix(size: int, pooled: int) -> np.ndarray:
    """(pooled, size): row i averages PyTorch's adaptive window [floor(i*size/pooled),
    ceil((i+1)*size/pooled)) of one axis."""
    matrix = np.zeros((pooled, size), np.float32)
    for i in range(pooled):
        start, end = (i * size) // pooled, -(-((i + 1) * size) // pooled)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def _vgg16(image_size: int) -> Network:
    def build(b: GraphBuilder, x: str) -> str:
        in_ch, size = 3, image_size
        for index, width in enumerate(arch.VGG16_CONFIG):
            path = f"features.{index + _vgg_offset(index)}"
            if width == arch.POOL:
                x, size = b.max_pool(x, path, 2, 2), size // 2
            else:
                x = b.relu(b.conv(x, path, in_ch, width, 3, padding=1), f"{path}.relu")
                in_ch = width
        pooled = arch.VGG_POOLED_SIZE
        if size != pooled:  # AdaptiveAvgPool2d((7, 7)) as P X P^T, P the pooling matrix
            rows = b.constant("avgpool.rows", adaptive_pool_matrix(size, pooled))
            cols = b.constant("avgpool.cols", adaptive_pool_matrix(size, pooled).T.copy())
            x = b.node("MatMul", [b.node("MatMul", [rows, x], "avgpool.h"), cols], "avgpool")
        x = b.node("Flatten", [x], "flatten", axis=1)
        hidden = arch.VGG_HIDDEN
        x = b.relu(b.linear(x, "classifier.0", in_ch * pooled * pooled, hidden), "classifier.1")
        x = b.relu(b.linear(x, "classifier.3", hidden, hidden), "classifier.4")
        return b.linear(x, "classifier.6", hidden, arch.NUM_CLASSES["vgg16"])

    return build


def _vgg_offset(index: int) -> int:
    """features.N of configuration entry `index`: each earlier conv also added a ReLU."""
    return sum(1 for width in arch.VGG16_CONFIG[:index] if width != arch.POOL)


def _mobilenet_v2(b: GraphBuilder, x: str) -> str:
    in_ch, head = arch.MOBILENET_V2_STEM, arch.MOBILENET_V2_HEAD
    x = b.relu6(_conv_bn(b, x, "features.0.", 3, in_ch, 3, 2, 1), "features.0.2")
    index = 1
    for t, c, n, s in arch.MOBILENET_V2_STAGES:
        for i in range(n):
            path, hidden, stride = f"features.{index}.conv.", in_ch * t, s if i == 0 else 1
            out, j = x, 0
            if t != 1:
                out = b.relu6(_conv_bn(b, out, f"{path}0.", in_ch, hidden, 1), f"{path}0.2")
                j = 1
            out = _conv_bn(b, out, f"{path}{j}.", hidden, hidden, 3, stride, 1, groups=hidden)
            out = b.relu6(out, f"{path}{j}.2")
            out = _conv_bn(b, out, path, hidden, c, 1, names=(f"{j + 1}", f"{j + 2}"))
            if stride == 1 and in_ch == c:
                out = b.node("Add", [x, out], f"features.{index}.add")
            x, in_ch, index = out, c, index + 1
    x = b.relu6(_conv_bn(b, x, f"features.{index}.", in_ch, head, 1), f"features.{index}.2")
    return b.linear(
        b.global_pool_flatten(x, "avgpool"), "classifier.1", head, arch.NUM_CLASSES["mobilenet_v2"]
    )


_EFF_EPS = arch.EFFICIENTNET_BN_EPS


def _mbconv(
    b: GraphBuilder,
    x: str,
    path: str,
    in_ch: int,
    out_ch: int,
    expand: int,
    kernel: int,
    stride: int,
) -> str:
    expanded, j, out = in_ch * expand, 0, x
    if expanded != in_ch:
        out = _conv_bn(b, out, f"{path}.block.0.", in_ch, expanded, 1, eps=_EFF_EPS)
        out, j = b.silu(out, f"{path}.block.0.2"), 1
    out = _conv_bn(
        b,
        out,
        f"{path}.block.{j}.",
        expanded,
        expanded,
        kernel,
        stride,
        (kernel - 1) // 2,
        groups=expanded,
        eps=_EFF_EPS,
    )
    out = b.silu(out, f"{path}.block.{j}.2")
    se, squeeze = f"{path}.block.{j + 1}", arch.squeeze_channels(in_ch)
    scale = b.node("GlobalAveragePool", [out], f"{se}.avgpool")
    scale = b.silu(b.conv(scale, f"{se}.fc1", expanded, squeeze, 1), f"{se}.activation")
    scale = b.sigmoid(b.conv(scale, f"{se}.fc2", squeeze, expanded, 1), f"{se}.scale_activation")
    out = b.node("Mul", [scale, out], f"{se}.mul")
    out = _conv_bn(b, out, f"{path}.block.{j + 2}.", expanded, out_ch, 1, eps=_EFF_EPS)
    if stride == 1 and in_ch == out_ch:
        out = b.node("Add", [out, x], f"{path}.add")
    return out


def _efficientnet_b0(b: GraphBuilder, x: str) -> str:
    stem, head = arch.EFFICIENTNET_B0_STEM, arch.EFFICIENTNET_B0_HEAD
    x = b.silu(_conv_bn(b, x, "features.0.", 3, stem, 3, 2, 1, eps=_EFF_EPS), "features.0.2")
    stages = arch.EFFICIENTNET_B0_STAGES
    for index, (expand, kernel, stride, in_ch, out_ch, repeats) in enumerate(stages, start=1):
        for i in range(repeats):
            x = _mbconv(
                b,
                x,
                f"features.{index}.{i}",
                in_ch if i == 0 else out_ch,
                out_ch,
                expand,
                kernel,
                stride if i == 0 else 1,
            )
    last, path = stages[-1].out_channels, f"features.{len(stages) + 1}."
    x = b.silu(_conv_bn(b, x, path, last, head, 1, eps=_EFF_EPS), f"{path}2")
    return b.linear(
        b.global_pool_flatten(x, "avgpool"),
        "classifier.1",
        head,
        arch.NUM_CLASSES["efficientnet_b0"],
    )


def lstm_onnx_order(canonical: np.ndarray, hidden: int) -> np.ndarray:
    """Gate blocks of the canonical order (input, forget, cell, output) in ONNX's (input,
    output, forget, cell), with ONNX's leading num_directions axis."""
    i, f, c, o = (canonical[k * hidden : (k + 1) * hidden] for k in range(4))
    return np.concatenate([i, o, f, c])[np.newaxis]


def _lstm(b: GraphBuilder, tokens: str) -> str:
    vocab, embed, hidden = arch.LSTM_VOCAB_SIZE, arch.LSTM_EMBED_DIM, arch.LSTM_HIDDEN_SIZE
    table = b.weight("embedding.weight", (vocab, embed), Init("normal", 1.0))
    x = b.node("Gather", [table, tokens], "embedding")  # (batch, seq, embed)
    x = b.node("Transpose", [x], "lstm.time_major", perm=[1, 0, 2])
    init = Init("uniform", hidden**-0.5)  # nn.LSTM's default
    p = b.parameters
    w_ih = p.take("lstm.weight_ih_l0", (4 * hidden, embed), init)
    w_hh = p.take("lstm.weight_hh_l0", (4 * hidden, hidden), init)
    bias = p.take("lstm.bias_l0", (4 * hidden,), init)
    # ONNX's LSTM adds two biases, Wb and Rb: the one canonical bias and zeros.
    both = np.concatenate([lstm_onnx_order(bias, hidden)[0], np.zeros(4 * hidden, np.float32)])
    inputs = [
        x,
        b.constant("lstm.W", lstm_onnx_order(w_ih, hidden)),
        b.constant("lstm.R", lstm_onnx_order(w_hh, hidden)),
        b.constant("lstm.B", both[np.newaxis]),
    ]
    b.nodes.append(_lstm_node(inputs, hidden))
    last = b.node("Squeeze", ["lstm.Y_h", b.constant("lstm.axes", np.array([0]))], "lstm.h_n")
    return b.linear(last, "fc", hidden, arch.NUM_CLASSES["lstm"])


def _lstm_node(inputs: list[str], hidden: int) -> NodeProto:
    # Outputs Y (every step) unused, Y_h (the last step's hidden state, (1, batch, hidden)).
    return helper.make_node("LSTM", inputs, ["", "lstm.Y_h"], name="lstm", hidden_size=hidden)


def _builder(model: str, params: Mapping[str, int]) -> Network:
    if model in arch.RESNETS:
        return _resnet(model)
    if model == "vgg16":
        return _vgg16(params["image_size"])
    networks: dict[str, Network] = {
        "lenet": _lenet,
        "mobilenet_v2": _mobilenet_v2,
        "efficientnet_b0": _efficientnet_b0,
        "lstm": _lstm,
    }
    return networks[model]


def model_input_shape(model: str, params: Mapping[str, int]) -> tuple[int, ...]:
    """One item's input: (channels, height, width), or (seq_len,) token ids for lstm."""
    if model == "lstm":
        return (params["seq_len"],)
    if model == "lenet":
        return (1, arch.LENET_IMAGE_SIZE, arch.LENET_IMAGE_SIZE)
    return (3, params["image_size"], params["image_size"])


def build_model(
    model: str,
    params: Mapping[str, int],
    weights: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
) -> Graph:
    """`model`'s graph at `params` (image_size or seq_len) with canonical `weights` (checked:
    every key used, none missing, each shaped as PyTorch's) or, without them, weights drawn
    from PyTorch's default initialisers seeded by `seed`."""
    arch.check_model_name(model)
    parameters = Parameters(model, weights, seed)
    b = GraphBuilder(parameters)
    item = model_input_shape(model, params)
    dtype = np.int64 if model == "lstm" else np.float32
    elem = TensorProto.INT64 if model == "lstm" else TensorProto.FLOAT
    build = _builder(model, params)
    build(b, INPUT)
    parameters.check_all_used()
    output_shape = (BATCH_AXIS, arch.NUM_CLASSES[model])
    metadata = {"model": model, "layout": "NCHW", "weights": "PyTorch state_dict names"}
    metadata |= {k: str(v) for k, v in params.items()}
    serialized = b.finish(
        [tensor_input(INPUT, elem, (BATCH_AXIS, *item))], OUTPUT, output_shape, model, metadata
    )
    return Graph(
        model,
        serialized,
        parameters.used,
        {INPUT: ((BATCH_AXIS, *item), dtype)},
        OUTPUT,
        output_shape,
    )


def canonical_weights(model: str, seed: int) -> dict[str, np.ndarray]:
    """A freshly initialised `model` (PyTorch's default initialisers, numpy-drawn, seeded) as
    canonical weights; its shapes do not depend on the image size."""
    params = {"image_size": 224, "seq_len": 1}
    return dict(build_model(model, params, None, seed).weights)


# ---------------------------------------------------------------------------- the operators


def build_op(op: str, params: Mapping[str, int], batch: int) -> Graph:
    """gemm: C = A @ B, batched over a leading axis when batch > 1 (as the torch plugin);
    conv2d: stride 1, bias-free, padding kernel//2 on both sides, weight an input too."""
    b = GraphBuilder(Parameters(op, None))
    if op == "gemm":
        m, n, k = params["m"], params["n"], params["k"]
        lead = (batch,) if batch > 1 else ()
        shapes = {"a": (*lead, m, k), "b": (*lead, k, n)}
        out_shape: tuple[int, ...] = (*lead, m, n)
        b.node("MatMul", ["a", "b"], "matmul")
    elif op == "conv2d":
        k, cin, cout = params["kernel"], params["channels_in"], params["channels_out"]
        h, w, pad = params["height"], params["width"], params["kernel"] // 2
        shapes = {"x": (batch, cin, h, w), "w": (cout, cin, k, k)}
        out_shape = (batch, cout, h + 2 * pad - k + 1, w + 2 * pad - k + 1)
        b.node("Conv", ["x", "w"], "conv", kernel_shape=[k, k], pads=[pad] * 4)
    else:
        raise ValueError(f"unknown operator {op!r}; valid: {', '.join(OPS)}")
    inputs = [tensor_input(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()]
    metadata = {"op": op, "batch": str(batch)} | {k: str(v) for k, v in params.items()}
    serialized = b.finish(inputs, "y", out_shape, op, metadata)
    return Graph(
        op, serialized, {}, {n: (s, np.float32) for n, s in shapes.items()}, "y", out_shape
    )


# ------------------------------------------------------------------ what a plugin runs them on


@functools.lru_cache(maxsize=2)
def cached_model(model: str, params: tuple[tuple[str, int], ...], seed: int) -> Graph:
    """A model's graph with seeded weights, kept for the next build of the same cell (the
    serialised graph only: the runtime that runs it reads its weights from there)."""
    return dataclasses.replace(build_model(model, dict(params), None, seed), weights={})


def cell_graph(name: str, params: Mapping[str, int], batch: int, seed: int) -> Graph:
    """The graph of a catalogue cell: an operator at the cell's shapes, or a model (cached)."""
    if name in OPS:
        return build_op(name, params, batch)
    return cached_model(name, tuple(sorted(params.items())), seed)


def synthetic_inputs(graph: Graph, batch: int, seed: int) -> dict[str, np.ndarray]:
    """A cell's inputs, drawn from `seed` (the weights come from `seed` itself): a model's
    batch (the symbolic batch axis = `batch`) or an operator's operands, standard normal
    floats, or token ids below the model's vocabulary."""
    rng = np.random.default_rng([seed, 1])
    inputs: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in graph.inputs.items():
        full = tuple(batch if isinstance(d, str) else d for d in shape)
        if dtype is np.int64:
            inputs[name] = rng.integers(0, graph.token_ids_below, full, dtype=np.int64)
        else:
            inputs[name] = rng.standard_normal(full, dtype=np.float32)
    return inputs


def output_shape(graph: Graph, batch: int) -> tuple[int, ...]:
    """The graph's output shape in a cell of `batch` items."""
    return tuple(batch if isinstance(d, str) else int(d) for d in graph.output_shape)


def describe_graph() -> dict[str, str]:
    """What every graph is: for Settings.extra and the export's metadata."""
    return {"opset": str(OPSET), "exported_from": EXPORTED_FROM}


__all__ = [
    "Graph",
    "build_model",
    "build_op",
    "cached_model",
    "canonical_weights",
    "cell_graph",
    "fan_in_uniform",
    "output_shape",
    "synthetic_inputs",
]


def equivalence_feed(model: str, inputs: object) -> tuple[dict[str, int], np.ndarray]:
    """An equivalence case's shape parameters and the graph's input: the LSTM's token ids
    (int64, seq_len from their length), or NCHW float32 images (image_size from their side)."""
    array = np.asarray(inputs)
    if model == "lstm":
        return {"seq_len": array.shape[1]}, array.astype(np.int64)
    return {"image_size": array.shape[-1]}, array.astype(np.float32)
