"""Building ONNX graphs by hand, with `onnx.helper`: the weights they take and the layers
(as PyTorch defines them) they are made of.

Why by hand: the plugin's environment holds no deep-learning framework to export from, and a
graph written node for node from the shared architecture tables is the same network as
agents/torch's models.py by construction. `Parameters` hands every layer its weights under
their canonical names (PyTorch state_dict names and layouts): either the caller's canonical
weights, checked (a missing key, a wrong shape or an unused key is refused, named), or draws
from PyTorch's default initialisers, seeded, which is also how `canonical_weights` makes them.
`GraphBuilder` adds nodes with PyTorch's semantics (symmetric padding, ReLU6 as Clip(0, 6),
SiLU as x * Sigmoid(x)) and turns the whole into a checked, serialised ModelProto."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

PLUGIN_VERSION = "0.1.0"
PRODUCER = "fwbench"
OPSET = 21  # ONNX opset of every graph; IR version 10 (the lowest that carries it)
EXPORTED_FROM = "fwbench architecture tables in PyTorch layouts (onnx.helper)"
BATCH_AXIS = "batch"  # the symbolic first dimension of a model graph's input and output


class WeightsError(ValueError):
    """Canonical weights that do not fit the graph: a key missing, unused, or mis-shaped."""


@dataclass(frozen=True)
class Init:
    """A PyTorch default initialiser: "uniform" in [-scale, scale], "normal" (std scale) or
    "constant" (every element = scale)."""

    kind: str
    scale: float


def fan_in_uniform(fan_in: int) -> Init:
    """nn.Conv2d's and nn.Linear's default for weights and biases (kaiming-uniform with
    a=sqrt(5) is uniform in +-1/sqrt(fan_in))."""
    return Init("uniform", 1.0 / float(np.sqrt(fan_in)))


ZEROS, ONES = Init("constant", 0.0), Init("constant", 1.0)


class Parameters:
    """Where a graph's weights come from: `given` canonical weights, or seeded draws."""

    def __init__(self, model: str, given: Mapping[str, np.ndarray] | None, seed: int = 0):
        self.model = model
        self._given = given
        self._rng = np.random.default_rng(seed)
        self.used: dict[str, np.ndarray] = {}

    def take(self, name: str, shape: Sequence[int], init: Init) -> np.ndarray:
        shape = tuple(shape)
        if self._given is None:
            array = self._draw(shape, init)
        elif name not in self._given:
            raise WeightsError(f"{self.model}: canonical weight {name!r} {shape} is missing")
        else:
            array = np.ascontiguousarray(self._given[name], dtype=np.float32)
            if array.shape != shape:
                raise WeightsError(
                    f"{self.model}: canonical weight {name!r} has shape {array.shape}, "
                    f"expected {shape}"
                )
        if name in self.used:
            raise ValueError(f"{self.model}: weight {name!r} defined twice")  # a model bug
        self.used[name] = array
        return array

    def _draw(self, shape: tuple[int, ...], init: Init) -> np.ndarray:
        if init.kind == "constant":
            return np.full(shape, init.scale, np.float32)
        if init.kind == "normal":
            return self._rng.standard_normal(shape, dtype=np.float32) * np.float32(init.scale)
        drawn = self._rng.random(shape, dtype=np.float32)  # in place: vgg16 has 138M weights
        drawn *= np.float32(2 * init.scale)
        drawn -= np.float32(init.scale)
        return drawn

    def check_all_used(self) -> None:
        if self._given is not None and (unused := sorted(set(self._given) - set(self.used))):
            shown = ", ".join(unused[:5]) + (" ..." if len(unused) > 5 else "")
            raise WeightsError(f"{self.model}: {len(unused)} canonical weights unused: {shown}")


class GraphBuilder:
    """Nodes and initialisers of one graph; layer helpers return their output's name."""

    def __init__(self, parameters: Parameters) -> None:
        self.parameters = parameters
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self._names: set[str] = set()

    def _unique(self, name: str) -> str:
        candidate, n = name, 1
        while candidate in self._names:
            candidate, n = f"{name}_{n}", n + 1
        self._names.add(candidate)
        return candidate

    def node(self, op: str, inputs: Sequence[str], name: str, **attrs: Any) -> str:
        """One node named `name` (the PyTorch module path); its output bears the same name."""
        out = self._unique(name)
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def node_outputs(
        self, op: str, inputs: Sequence[str], names: Sequence[str], **attrs: Any
    ) -> list[str]:
        """One node of several outputs (Split), named `names` (made unique)."""
        outs = [self._unique(name) for name in names]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=outs[0], **attrs))
        return outs

    def constant(self, name: str, array: np.ndarray) -> str:
        """A non-canonical initialiser (a reordered LSTM weight, a pooling matrix, a bound)."""
        if name not in self._names:
            self._names.add(name)
            self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, name: str, shape: Sequence[int], init: Init) -> str:
        """A canonical weight, taken from the parameters and stored under its own name."""
        array = self.parameters.take(name, shape, init)
        self._names.add(name)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    # ------------------------------------------------------------------ PyTorch's layers

    def conv(
        self,
        x: str,
        path: str,
        in_ch: int,
        out_ch: int,
        kernel: int,
        stride: int = 1,
        padding: int = 0,
        groups: int = 1,
        bias: bool = True,
    ) -> str:
        """nn.Conv2d: weight (out, in/groups, k, k), padding on both sides of both axes."""
        fan_in = in_ch // groups * kernel * kernel
        inputs = [
            x,
            self.weight(
                f"{path}.weight", (out_ch, in_ch // groups, kernel, kernel), fan_in_uniform(fan_in)
            ),
        ]
        if bias:
            inputs.append(self.weight(f"{path}.bias", (out_ch,), fan_in_uniform(fan_in)))
        return self.node(
            "Conv",
            inputs,
            path,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[padding] * 4,
            group=groups,
        )

    def batch_norm(self, x: str, path: str, channels: int, eps: float) -> str:
        """nn.BatchNorm2d in eval mode: running statistics."""
        names = [
            self.weight(f"{path}.{n}", (channels,), init)
            for n, init in (
                ("weight", ONES),
                ("bias", ZEROS),
                ("running_mean", ZEROS),
                ("running_var", ONES),
            )
        ]
        return self.node("BatchNormalization", [x, *names], path, epsilon=eps)

    def linear(self, x: str, path: str, in_features: int, out_features: int) -> str:
        """nn.Linear: y = x W^T + b, W (out, in)."""
        init = fan_in_uniform(in_features)
        w = self.weight(f"{path}.weight", (out_features, in_features), init)
        b = self.weight(f"{path}.bias", (out_features,), init)
        return self.node("Gemm", [x, w, b], path, transB=1)

    def relu(self, x: str, path: str) -> str:
        return self.node("Relu", [x], path)

    def relu6(self, x: str, path: str) -> str:
        low = self.constant("relu6.min", np.array(0.0, np.float32))
        high = self.constant("relu6.max", np.array(6.0, np.float32))
        return self.node("Clip", [x, low, high], path)

    def sigmoid(self, x: str, path: str) -> str:
        return self.node("Sigmoid", [x], path)

    def silu(self, x: str, path: str) -> str:
        return self.node("Mul", [x, self.sigmoid(x, f"{path}.sigmoid")], path)

    def max_pool(self, x: str, path: str, kernel: int, stride: int, padding: int = 0) -> str:
        """nn.MaxPool2d; ONNX pads are ignored by the max, as PyTorch's -inf padding."""
        return self.node(
            "MaxPool",
            [x],
            path,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[padding] * 4,
        )

    def global_pool_flatten(self, x: str, path: str) -> str:
        """AdaptiveAvgPool2d(1) then torch.flatten(x, 1)."""
        return self.node("Flatten", [self.node("GlobalAveragePool", [x], path)], "flatten", axis=1)

    def finish(
        self,
        inputs: Sequence[onnx.ValueInfoProto],
        output: str,
        output_shape: Sequence[int | str],
        name: str,
        metadata: Mapping[str, str],
        more_outputs: Sequence[onnx.ValueInfoProto] = (),
    ) -> bytes:
        """The serialised, checked model: the last node's output renamed `output` (unless a
        node already makes `output`), then `more_outputs` (values of the graph by their names:
        a generation's next token and KV entries)."""
        if output not in self._names:
            self.nodes[-1].output[0] = output
        graph = helper.make_graph(
            self.nodes,
            name,
            list(inputs),
            [
                helper.make_tensor_value_info(output, TensorProto.FLOAT, list(output_shape)),
                *more_outputs,
            ],
            initializer=self.initializers,
        )
        opsets = [helper.make_opsetid("", OPSET)]
        model = helper.make_model(
            graph,
            opset_imports=opsets,
            ir_version=helper.find_min_ir_version_for(opsets),
            producer_name=PRODUCER,
            producer_version=PLUGIN_VERSION,
            doc_string=f"{name}: {EXPORTED_FROM}",
        )
        helper.set_model_props(model, dict(metadata))
        serialized: bytes = model.SerializeToString()
        onnx.checker.check_model(serialized)
        return serialized


def tensor_input(name: str, elem_type: int, shape: Sequence[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem_type, list(shape))
