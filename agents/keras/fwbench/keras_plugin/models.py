"""The catalogue's models in Keras 3 layers (keras.layers, keras.ops: backend-neutral code, one
definition for the torch, jax and tensorflow backends), layer for layer as the PyTorch
plugin's (agents/torch/fwbench/torch_plugin/models.py): same order, channels, strides, bias
flags, BatchNorm epsilons and momentum, dropout placement. The numbers come from
``fwbench.runtime.architectures``.

Channels-last (Keras' default, NHWC). PyTorch pads every side alike; Keras' "same" pads one
pixel more at the end for a stride-2 convolution on an even map, so those convolutions (and
the 3x3 stride-2 max-pool) get an explicit ZeroPadding2D and "valid". Each layer that holds
weights is recorded as a `Mapped` under its PyTorch ``state_dict`` prefix; weights.py turns
those into canonical weights and back. Initialisation is Keras' own (Glorot-uniform kernels,
zero biases): the models are benchmarked, and the equivalence tests load canonical weights.
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import keras
import numpy as np

from fwbench.runtime import architectures as arch
from fwbench.runtime.architectures import (
    LENET_IMAGE_SIZE,
    LSTM_EMBED_DIM,
    LSTM_HIDDEN_SIZE,
    LSTM_VOCAB_SIZE,
    NUM_CLASSES,
)
from fwbench.runtime.architectures import check_model_name as check_name

MODEL_NAMES = arch.MODEL_NAMES  # re-exported: plugin.py and the tests read it here
Tensor = Any  # a symbolic KerasTensor while the functional graph is built


@dataclass(frozen=True)
class Mapped:
    """A Keras layer holding the weights of PyTorch's module `prefix`. kind: conv, depthwise,
    dense, batchnorm, embedding, lstm, or, in the transformers, layernorm and bias.
    `features`: for a dense layer fed by a flattened feature map, its (C, H, W), which PyTorch
    flattens in that order and Keras in (H, W, C)."""

    prefix: str
    kind: str
    layer: keras.layers.Layer
    features: tuple[int, int, int] | None = None


@dataclass
class Net:
    """A built model and its weight map."""

    name: str
    model: keras.Model
    mapped: list[Mapped] = field(default_factory=list)

    def trainable_parameters(self) -> int:
        return sum(math.prod(v.shape) for v in self.model.trainable_weights)


@functools.cache
def adaptive_pool_matrix(size_in: int, size_out: int) -> np.ndarray:
    """(size_out, size_in) averaging weights of nn.AdaptiveAvgPool along one axis: output bin i
    averages inputs floor(i * in / out) .. ceil((i + 1) * in / out) - 1."""
    matrix = np.zeros((size_out, size_in), dtype=np.float32)
    for i in range(size_out):
        start = (i * size_in) // size_out
        end = -(-((i + 1) * size_in) // size_out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


class AdaptiveAveragePooling2D(keras.layers.Layer):  # type: ignore[misc]  # Keras is untyped
    """nn.AdaptiveAvgPool2d((size, size)) on NHWC, exact for every input size (the bins
    overlap when the size does not divide), as two constant pooling matrices (keras.ops)."""

    def __init__(self, size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.size = size

    def call(self, x: Tensor) -> Tensor:
        rows = adaptive_pool_matrix(int(x.shape[1]), self.size)
        cols = adaptive_pool_matrix(int(x.shape[2]), self.size)
        rows_t = keras.ops.convert_to_tensor(rows, dtype=self.compute_dtype)
        cols_t = keras.ops.convert_to_tensor(cols, dtype=self.compute_dtype)
        return keras.ops.einsum("ih,bhwc,jw->bijc", rows_t, x, cols_t)

    def compute_output_shape(self, input_shape: tuple[int, ...]) -> tuple[int | None, ...]:
        return (input_shape[0], self.size, self.size, input_shape[3])


def _keras_name(prefix: str) -> str:
    return prefix.replace(".", "_")


class _Builder:
    """Applies layers to a functional graph and records those that hold weights."""

    def __init__(self, with_dropout: bool) -> None:
        self.mapped: list[Mapped] = []
        self.with_dropout = with_dropout

    def conv(
        self,
        x: Tensor,
        prefix: str,
        out: int,
        kernel: int,
        stride: int = 1,
        padding: int = 0,
        bias: bool = False,
        depthwise: bool = False,
    ) -> Tensor:
        """A convolution padded `padding` on every side, as PyTorch's."""
        if padding and stride == 1 and 2 * padding == kernel - 1:
            mode = "same"  # symmetric at stride 1 with an odd kernel
        else:
            mode = "valid"
            if padding:
                x = keras.layers.ZeroPadding2D(padding, name=_keras_name(prefix) + "_pad")(x)
        name = _keras_name(prefix)
        layer: keras.layers.Layer
        if depthwise:
            layer = keras.layers.DepthwiseConv2D(kernel, stride, mode, use_bias=bias, name=name)
        else:
            layer = keras.layers.Conv2D(out, kernel, stride, mode, use_bias=bias, name=name)
        self.mapped.append(Mapped(prefix, "depthwise" if depthwise else "conv", layer))
        return layer(x)

    def bn(self, x: Tensor, prefix: str, eps: float = arch.BN_EPS) -> Tensor:
        # PyTorch's momentum m updates running = (1 - m) * running + m * batch; Keras' is 1 - m.
        layer = keras.layers.BatchNormalization(
            momentum=1.0 - arch.BN_MOMENTUM, epsilon=eps, name=_keras_name(prefix)
        )
        self.mapped.append(Mapped(prefix, "batchnorm", layer))
        return layer(x)

    def dense(
        self, x: Tensor, prefix: str, out: int, features: tuple[int, int, int] | None = None
    ) -> Tensor:
        layer = keras.layers.Dense(out, name=_keras_name(prefix))
        self.mapped.append(Mapped(prefix, "dense", layer, features))
        return layer(x)

    def dropout(self, x: Tensor, rate: float) -> Tensor:
        return keras.layers.Dropout(rate)(x) if self.with_dropout and rate > 0 else x

    def conv_bn_act(
        self,
        x: Tensor,
        prefix: str,
        out: int,
        kernel: int,
        stride: int = 1,
        depthwise: bool = False,
        activation: str | None = "relu6",
        eps: float = arch.BN_EPS,
    ) -> Tensor:
        """torchvision's Conv2dNormActivation: bias-free conv (prefix.0), BatchNorm (prefix.1)."""
        padding = (kernel - 1) // 2
        x = self.conv(x, f"{prefix}.0", out, kernel, stride, padding, depthwise=depthwise)
        return _activate(self.bn(x, f"{prefix}.1", eps), activation)


def _activate(x: Tensor, activation: str | None) -> Tensor:
    if activation is None:
        return x
    if activation == "relu6":
        return keras.layers.ReLU(max_value=6.0)(x)
    return keras.layers.Activation(activation)(x)


def _max_pool_3x3_s2_p1(x: Tensor) -> Tensor:
    """nn.MaxPool2d(3, 2, padding=1). PyTorch pads with -inf; zero padding is the same here,
    the input coming out of a ReLU (>= 0) and every window holding a real element."""
    return keras.layers.MaxPooling2D(3, 2)(keras.layers.ZeroPadding2D(1)(x))


# ------------------------------------------------------------------------------------ models


def _lenet(b: _Builder, x: Tensor, classes: int) -> Tensor:
    index = 0
    for conv in arch.LENET_CONVS:  # conv, ReLU, max-pool: three modules each
        x = b.conv(
            x, f"features.{index}", conv.channels, conv.kernel, padding=conv.padding, bias=True
        )
        x = keras.layers.MaxPooling2D(2)(keras.layers.ReLU()(x))
        index += 3
    x = keras.layers.Flatten()(x)
    features: tuple[int, int, int] | None = arch.LENET_FEATURES
    index = 0
    for hidden in arch.LENET_HIDDEN:  # dense and ReLU: two modules each
        x = keras.layers.ReLU()(b.dense(x, f"classifier.{index}", hidden, features))
        features, index = None, index + 2
    return b.dense(x, f"classifier.{index}", classes)


def _resnet_block(
    b: _Builder, x: Tensor, prefix: str, block: str, planes: int, stride: int, project: bool
) -> Tensor:
    out_ch = planes * arch.BLOCK_EXPANSION[block]
    identity = x
    if project:
        identity = b.conv(x, f"{prefix}.downsample.0", out_ch, 1, stride)
        identity = b.bn(identity, f"{prefix}.downsample.1")
    if block == "basic":
        y = keras.layers.ReLU()(
            b.bn(b.conv(x, f"{prefix}.conv1", planes, 3, stride, 1), f"{prefix}.bn1")
        )
        y = b.bn(b.conv(y, f"{prefix}.conv2", planes, 3, 1, 1), f"{prefix}.bn2")
    else:  # ResNet v1.5: the stride sits on the 3x3 conv
        y = keras.layers.ReLU()(b.bn(b.conv(x, f"{prefix}.conv1", planes, 1), f"{prefix}.bn1"))
        y = b.conv(y, f"{prefix}.conv2", planes, 3, stride, 1)
        y = keras.layers.ReLU()(b.bn(y, f"{prefix}.bn2"))
        y = b.bn(b.conv(y, f"{prefix}.conv3", out_ch, 1), f"{prefix}.bn3")
    return keras.layers.ReLU()(keras.layers.Add()([y, identity]))


def _resnet(spec: arch.ResNetSpec) -> Any:
    def build(b: _Builder, x: Tensor, classes: int) -> Tensor:
        stem = arch.RESNET_STEM_CHANNELS
        x = keras.layers.ReLU()(b.bn(b.conv(x, "conv1", stem, 7, 2, 3), "bn1"))
        x = _max_pool_3x3_s2_p1(x)
        in_ch = stem
        widths = arch.RESNET_STAGE_WIDTHS
        for stage, (planes, depth) in enumerate(zip(widths, spec.depths, strict=True)):
            out_ch = planes * arch.BLOCK_EXPANSION[spec.block]
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                project = i == 0 and (stride != 1 or in_ch != out_ch)
                x = _resnet_block(
                    b, x, f"layer{stage + 1}.{i}", spec.block, planes, stride, project
                )
                in_ch = out_ch
        x = keras.layers.GlobalAveragePooling2D()(x)
        return b.dense(x, "fc", classes)

    return build


def _vgg16(b: _Builder, x: Tensor, classes: int) -> Tensor:
    index, channels = 0, 3
    for width in arch.VGG16_CONFIG:
        if width == arch.POOL:
            x = keras.layers.MaxPooling2D(2, 2)(x)
            index += 1
        else:  # conv with bias, ReLU
            x = keras.layers.ReLU()(b.conv(x, f"features.{index}", width, 3, 1, 1, bias=True))
            index, channels = index + 2, width
    pooled = arch.VGG_POOLED_SIZE
    if x.shape[1] != pooled or x.shape[2] != pooled:  # the identity at 224 pixels
        x = AdaptiveAveragePooling2D(pooled)(x)
    x = keras.layers.Flatten()(x)
    features = (channels, pooled, pooled)
    x = b.dropout(
        keras.layers.ReLU()(b.dense(x, "classifier.0", arch.VGG_HIDDEN, features)), arch.VGG_DROPOUT
    )
    x = b.dropout(
        keras.layers.ReLU()(b.dense(x, "classifier.3", arch.VGG_HIDDEN)), arch.VGG_DROPOUT
    )
    return b.dense(x, "classifier.6", classes)


def _mobilenet_v2(b: _Builder, x: Tensor, classes: int) -> Tensor:
    in_ch = arch.MOBILENET_V2_STEM
    x = b.conv_bn_act(x, "features.0", in_ch, 3, 2)
    index = 1
    for t, c, n, s in arch.MOBILENET_V2_STAGES:
        for i in range(n):
            stride, hidden, prefix = (s if i == 0 else 1), in_ch * t, f"features.{index}.conv"
            y, j = x, 0
            if t != 1:
                y, j = b.conv_bn_act(y, f"{prefix}.0", hidden, 1), 1
            y = b.conv_bn_act(y, f"{prefix}.{j}", hidden, 3, stride, depthwise=True)
            # The projection is linear on purpose, as torchvision's.
            y = b.bn(b.conv(y, f"{prefix}.{j + 1}", c, 1), f"{prefix}.{j + 2}")
            x = keras.layers.Add()([x, y]) if stride == 1 and in_ch == c else y
            in_ch, index = c, index + 1
    x = b.conv_bn_act(x, f"features.{index}", arch.MOBILENET_V2_HEAD, 1)
    x = b.dropout(keras.layers.GlobalAveragePooling2D()(x), arch.MOBILENET_V2_DROPOUT)
    return b.dense(x, "classifier.1", classes)


def _squeeze_excitation(b: _Builder, x: Tensor, prefix: str, channels: int, squeeze: int) -> Tensor:
    scale = keras.layers.GlobalAveragePooling2D(keepdims=True)(x)
    scale = keras.layers.Activation("silu")(b.conv(scale, f"{prefix}.fc1", squeeze, 1, bias=True))
    scale = keras.layers.Activation("sigmoid")(
        b.conv(scale, f"{prefix}.fc2", channels, 1, bias=True)
    )
    return keras.layers.Multiply()([scale, x])


def _efficientnet_b0(b: _Builder, x: Tensor, classes: int) -> Tensor:
    eps = arch.EFFICIENTNET_BN_EPS
    x = b.conv_bn_act(x, "features.0", arch.EFFICIENTNET_B0_STEM, 3, 2, activation="silu", eps=eps)
    for stage, (expand, kernel, stride, in_ch, out_ch, repeats) in enumerate(
        arch.EFFICIENTNET_B0_STAGES, start=1
    ):
        for i in range(repeats):
            block_in, block_stride = (in_ch, stride) if i == 0 else (out_ch, 1)
            expanded, prefix = block_in * expand, f"features.{stage}.{i}.block"
            y, j = x, 0
            if expanded != block_in:
                y, j = b.conv_bn_act(y, f"{prefix}.0", expanded, 1, activation="silu", eps=eps), 1
            y = b.conv_bn_act(y, f"{prefix}.{j}", expanded, kernel, block_stride, True, "silu", eps)
            squeeze = arch.squeeze_channels(block_in)
            y = _squeeze_excitation(b, y, f"{prefix}.{j + 1}", expanded, squeeze)
            y = b.conv_bn_act(y, f"{prefix}.{j + 2}", out_ch, 1, activation=None, eps=eps)
            x = keras.layers.Add()([y, x]) if block_stride == 1 and block_in == out_ch else y
    last = len(arch.EFFICIENTNET_B0_STAGES) + 1
    x = b.conv_bn_act(
        x, f"features.{last}", arch.EFFICIENTNET_B0_HEAD, 1, activation="silu", eps=eps
    )
    x = b.dropout(keras.layers.GlobalAveragePooling2D()(x), arch.EFFICIENTNET_B0_DROPOUT)
    return b.dense(x, "classifier.1", classes)


def _lstm(b: _Builder, x: Tensor, classes: int) -> Tensor:
    embedding = keras.layers.Embedding(LSTM_VOCAB_SIZE, LSTM_EMBED_DIM, name="embedding")
    # Keras' LSTM: one bias vector, gates input, forget, cell, output (PyTorch's order).
    lstm = keras.layers.LSTM(LSTM_HIDDEN_SIZE, name="lstm")
    b.mapped += [Mapped("embedding", "embedding", embedding), Mapped("lstm", "lstm", lstm)]
    return b.dense(lstm(embedding(x)), "fc", classes)


_BUILDERS = {
    "lenet": _lenet,
    "resnet18": _resnet(arch.RESNETS["resnet18"]),
    "resnet50": _resnet(arch.RESNETS["resnet50"]),
    "resnet152": _resnet(arch.RESNETS["resnet152"]),
    "vgg16": _vgg16,
    "mobilenet_v2": _mobilenet_v2,
    "efficientnet_b0": _efficientnet_b0,
    "lstm": _lstm,
}


def input_shape(name: str, image_size: int = 224, seq_len: int = 200) -> tuple[int, ...]:
    """One item's shape as the model takes it: NHWC images, token ids for lstm."""
    if name == "lstm":
        return (seq_len,)
    if name == "lenet":
        return (LENET_IMAGE_SIZE, LENET_IMAGE_SIZE, 1)
    if image_size < arch.MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be >= {arch.MIN_IMAGE_SIZE} for {name}")
    return (image_size, image_size, 3)


def build_model(
    name: str,
    *,
    image_size: int = 224,
    seq_len: int = 200,
    with_dropout: bool = True,
    dtype: str | None = None,
) -> Net:
    """A freshly initialised functional model (seeded by keras.utils.set_random_seed) with its
    weight map; `dtype` a Keras dtype policy name (None: the global policy, float32)."""
    check_name(name)
    shape = input_shape(name, image_size, seq_len)
    inputs = keras.Input(shape, dtype="int32" if name == "lstm" else dtype, name="inputs")
    builder = _Builder(with_dropout)
    with dtype_policy(dtype):
        outputs = _BUILDERS[name](builder, inputs, NUM_CLASSES[name])
        model = keras.Model(inputs, outputs, name=name)
    return Net(name, model, builder.mapped)


@contextlib.contextmanager
def dtype_policy(name: str | None) -> Iterator[None]:
    """Keras' global dtype policy `name` while layers are made (None: leave it as it is)."""
    if name is None:
        yield
        return
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)
