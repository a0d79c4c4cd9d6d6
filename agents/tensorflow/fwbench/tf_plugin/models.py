"""TensorFlow definitions of fwbench's catalogue models, NHWC, layer for layer as the PyTorch
plugin's (agents/torch/fwbench/torch_plugin/models.py): same order, channels, strides,
symmetric padding, bias flags, BatchNorm epsilons and momentum, dropout placement; every
weight registered under its PyTorch ``state_dict`` name (see `layers.ParamStore`). The
numbers (channels, depths, strides, stage tables) come from ``fwbench.runtime.architectures``.

Initialisation is Keras' default (Glorot-uniform kernels, zero biases, uniform(-0.05, 0.05)
embeddings, orthogonal recurrent kernel), not PyTorch's: the models are benchmarked, and
equivalence tests load canonical weights anyway.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import tensorflow as tf

from fwbench.runtime import architectures as arch
from fwbench.runtime.architectures import (
    LENET_IMAGE_SIZE,
    LSTM_EMBED_DIM,
    LSTM_HIDDEN_SIZE,
    LSTM_VOCAB_SIZE,
    NUM_CLASSES,
)
from fwbench.runtime.architectures import check_model_name as check_name
from fwbench.tf_plugin.layers import (
    LSTM,
    Activation,
    BatchNorm,
    Conv2D,
    Dense,
    Embedding,
    ParamStore,
    adaptive_avg_pool,
    dropout,
    global_avg_pool,
    max_pool_2x2,
    max_pool_3x3_s2_p1,
)

MODEL_NAMES = arch.MODEL_NAMES  # re-exported: plugin.py and the tests read it here
_EFFNET_BN_EPS = arch.EFFICIENTNET_BN_EPS


class Model(Protocol):
    store: ParamStore

    def __call__(self, x: tf.Tensor, /, training: bool) -> tf.Tensor: ...


def _relu6(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.relu6(x)


def _silu(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.silu(x)


# --------------------------------------------------------------------------------------- LeNet


class LeNet:
    """LeNet-5 for 1x28x28 inputs (architectures.LENET_*)."""

    def __init__(self, store: ParamStore, num_classes: int, dropout_scale: float) -> None:
        self.store = store
        (c1, c2), (h1, h2) = arch.LENET_CONVS, arch.LENET_HIDDEN
        self.flat = math.prod(arch.LENET_FEATURES)
        self.conv1 = Conv2D(
            store, "features.0", 1, c1.channels, c1.kernel, pad=c1.padding, bias=True
        )
        self.conv2 = Conv2D(
            store, "features.3", c1.channels, c2.channels, c2.kernel, pad=c2.padding, bias=True
        )
        self.fc1 = Dense(store, "classifier.0", self.flat, h1, arch.LENET_FEATURES)
        self.fc2 = Dense(store, "classifier.2", h1, h2)
        self.fc3 = Dense(store, "classifier.4", h2, num_classes)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        x = max_pool_2x2(tf.nn.relu(self.conv1(x)))
        x = max_pool_2x2(tf.nn.relu(self.conv2(x)))
        x = tf.reshape(x, (-1, self.flat))  # (H, W, C) order; fc1's rows are permuted to match
        return self.fc3(tf.nn.relu(self.fc2(tf.nn.relu(self.fc1(x)))))


# -------------------------------------------------------------------------------------- ResNet


class _ConvBN:
    """Bias-free conv + BatchNorm (+ activation): ResNet's pairs and torchvision's
    Conv2dNormActivation (named `<name>.0` / `<name>.1` there, `conv_name` / `bn_name` here)."""

    def __init__(
        self,
        store: ParamStore,
        conv_name: str,
        bn_name: str,
        in_ch: int,
        out_ch: int,
        kernel: int,
        stride: int = 1,
        *,
        depthwise: bool = False,
        activation: Activation | None = None,
        eps: float = arch.BN_EPS,
    ) -> None:
        pad = (kernel - 1) // 2
        self.conv = Conv2D(
            store, conv_name, in_ch, out_ch, kernel, stride, pad, depthwise=depthwise
        )
        self.bn = BatchNorm(store, bn_name, out_ch, eps)
        self.activation = activation

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        y = self.bn(self.conv(x), training)
        return y if self.activation is None else self.activation(y)


def _sequential(
    store: ParamStore,
    name: str,
    in_ch: int,
    out_ch: int,
    kernel: int,
    stride: int = 1,
    **kwargs: Any,
) -> _ConvBN:
    """A Conv2dNormActivation registered as torchvision's Sequential: `name.0`, `name.1`."""
    return _ConvBN(store, f"{name}.0", f"{name}.1", in_ch, out_ch, kernel, stride, **kwargs)


class _Block(Protocol):
    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor: ...


class BasicBlock:
    expansion = 1

    def __init__(self, store: ParamStore, name: str, in_ch: int, planes: int, stride: int) -> None:
        relu = tf.nn.relu
        self.branch = [
            _ConvBN(
                store, f"{name}.conv1", f"{name}.bn1", in_ch, planes, 3, stride, activation=relu
            ),
            _ConvBN(store, f"{name}.conv2", f"{name}.bn2", planes, planes, 3),
        ]
        self.downsample = _downsample(store, name, in_ch, planes, stride)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        return _residual(self.branch, self.downsample, x, training)


class Bottleneck:
    """ResNet v1.5 bottleneck, as torchvision: the stride sits on the 3x3 conv, not the 1x1."""

    expansion = 4

    def __init__(self, store: ParamStore, name: str, in_ch: int, planes: int, stride: int) -> None:
        relu, out_ch = tf.nn.relu, planes * self.expansion
        self.branch = [
            _ConvBN(store, f"{name}.conv1", f"{name}.bn1", in_ch, planes, 1, activation=relu),
            _ConvBN(
                store, f"{name}.conv2", f"{name}.bn2", planes, planes, 3, stride, activation=relu
            ),
            _ConvBN(store, f"{name}.conv3", f"{name}.bn3", planes, out_ch, 1),
        ]
        self.downsample = _downsample(store, name, in_ch, out_ch, stride)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        return _residual(self.branch, self.downsample, x, training)


def _downsample(
    store: ParamStore, name: str, in_ch: int, out_ch: int, stride: int
) -> _ConvBN | None:
    # The shortcut needs a projection whenever the block changes resolution or width.
    if stride == 1 and in_ch == out_ch:
        return None
    return _sequential(store, f"{name}.downsample", in_ch, out_ch, 1, stride)


def _residual(
    branch: list[_ConvBN], downsample: _ConvBN | None, x: tf.Tensor, training: bool
) -> tf.Tensor:
    identity = x if downsample is None else downsample(x, training)
    out = x
    for layer in branch:
        out = layer(out, training)
    return tf.nn.relu(out + identity)


_BLOCKS: dict[str, type[BasicBlock | Bottleneck]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}


class ResNet:
    def __init__(self, store: ParamStore, spec: arch.ResNetSpec, num_classes: int) -> None:
        self.store = store
        block, in_ch = _BLOCKS[spec.block], arch.RESNET_STEM_CHANNELS
        self.stem = _ConvBN(store, "conv1", "bn1", 3, in_ch, 7, 2, activation=tf.nn.relu)
        self.blocks: list[_Block] = []
        widths = arch.RESNET_STAGE_WIDTHS
        for stage, (planes, depth) in enumerate(zip(widths, spec.depths, strict=True)):
            for i in range(depth):
                stride = 2 if stage > 0 and i == 0 else 1
                self.blocks.append(block(store, f"layer{stage + 1}.{i}", in_ch, planes, stride))
                in_ch = planes * block.expansion
        self.fc = Dense(store, "fc", in_ch, num_classes)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        x = max_pool_3x3_s2_p1(self.stem(x, training))
        for block in self.blocks:
            x = block(x, training)
        return self.fc(global_avg_pool(x))


# ----------------------------------------------------------------------------------------- VGG


class VGG16:
    def __init__(self, store: ParamStore, num_classes: int, dropout_scale: float) -> None:
        self.store = store
        self.dropout = arch.VGG_DROPOUT * dropout_scale
        self.features: list[Conv2D | None] = []  # None marks a max-pool
        in_ch = 3
        for index, width in self._torch_indices().items():
            if width == arch.POOL:
                self.features.append(None)
                continue
            # No BatchNorm in plain vgg16, so these convs keep their bias.
            self.features.append(
                Conv2D(store, f"features.{index}", in_ch, width, 3, pad=1, bias=True)
            )
            in_ch = width
        pooled, hidden = arch.VGG_POOLED_SIZE, arch.VGG_HIDDEN
        self.flat = (in_ch, pooled, pooled)
        flat = math.prod(self.flat)
        self.fc1 = Dense(store, "classifier.0", flat, hidden, flattened_from=self.flat)
        self.fc2 = Dense(store, "classifier.3", hidden, hidden)
        self.fc3 = Dense(store, "classifier.6", hidden, num_classes)

    @staticmethod
    def _torch_indices() -> dict[int, int]:
        """Position in torchvision's `features` Sequential (conv, ReLU, ..., pool) -> width."""
        indices, position = {}, 0
        for width in arch.VGG16_CONFIG:
            indices[position] = width
            position += 1 if width == arch.POOL else 2  # a conv is followed by its ReLU
        return indices

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        for conv in self.features:
            x = max_pool_2x2(x) if conv is None else tf.nn.relu(conv(x))
        # Adaptive pooling keeps the 25088-wide classifier valid for every image size.
        channels, pooled, _ = self.flat
        x = tf.reshape(adaptive_avg_pool(x, pooled), (-1, pooled * pooled * channels))
        x = dropout(tf.nn.relu(self.fc1(x)), self.dropout, training)
        x = dropout(tf.nn.relu(self.fc2(x)), self.dropout, training)
        return self.fc3(x)


# ------------------------------------------------------------------------------- MobileNetV2


class InvertedResidual:
    """MobileNetV2 block: 1x1 expand -> 3x3 depthwise -> linear 1x1 project (+ identity)."""

    def __init__(
        self, store: ParamStore, name: str, in_ch: int, out_ch: int, stride: int, expand: int
    ) -> None:
        hidden = in_ch * expand
        self.use_residual = stride == 1 and in_ch == out_ch
        self.layers: list[_ConvBN] = []
        if expand != 1:
            self.layers.append(
                _sequential(store, f"{name}.conv.0", in_ch, hidden, 1, activation=_relu6)
            )
        i = len(self.layers)
        self.layers += [
            _sequential(
                store,
                f"{name}.conv.{i}",
                hidden,
                hidden,
                3,
                stride,
                depthwise=True,
                activation=_relu6,
            ),
            # The projection is linear on purpose (no activation).
            _ConvBN(store, f"{name}.conv.{i + 1}", f"{name}.conv.{i + 2}", hidden, out_ch, 1),
        ]

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        out = x
        for layer in self.layers:
            out = layer(out, training)
        return x + out if self.use_residual else out


class MobileNetV2:
    def __init__(self, store: ParamStore, num_classes: int, dropout_scale: float) -> None:
        self.store = store
        self.dropout = arch.MOBILENET_V2_DROPOUT * dropout_scale
        in_ch, head = arch.MOBILENET_V2_STEM, arch.MOBILENET_V2_HEAD
        self.features: list[_Block] = [
            _sequential(store, "features.0", 3, in_ch, 3, 2, activation=_relu6)
        ]
        for t, c, n, s in arch.MOBILENET_V2_STAGES:
            for i in range(n):
                name = f"features.{len(self.features)}"
                self.features.append(InvertedResidual(store, name, in_ch, c, s if i == 0 else 1, t))
                in_ch = c
        name = f"features.{len(self.features)}"
        self.features.append(_sequential(store, name, in_ch, head, 1, activation=_relu6))
        self.classifier = Dense(store, "classifier.1", head, num_classes)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        for layer in self.features:
            x = layer(x, training)
        return self.classifier(dropout(global_avg_pool(x), self.dropout, training))


# ------------------------------------------------------------------------------ EfficientNet


class SqueezeExcitation:
    """Channel gating with biased 1x1 convs on the pooled 1x1 map (as torchvision)."""

    def __init__(self, store: ParamStore, name: str, channels: int, squeeze: int) -> None:
        self.fc1 = Conv2D(store, f"{name}.fc1", channels, squeeze, 1, bias=True)
        self.fc2 = Conv2D(store, f"{name}.fc2", squeeze, channels, 1, bias=True)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        scale = self.fc2(tf.nn.silu(self.fc1(global_avg_pool(x, keepdims=True))))
        return tf.sigmoid(scale) * x


class MBConv:
    """EfficientNet block, without stochastic depth (as the PyTorch plugin)."""

    def __init__(
        self,
        store: ParamStore,
        name: str,
        in_ch: int,
        out_ch: int,
        expand: int,
        kernel: int,
        stride: int,
    ) -> None:
        self.use_residual = stride == 1 and in_ch == out_ch
        expanded = in_ch * expand
        eps = _EFFNET_BN_EPS
        self.layers: list[Callable[[tf.Tensor, bool], tf.Tensor]] = []
        if expanded != in_ch:
            self.layers.append(
                _sequential(store, f"{name}.block.0", in_ch, expanded, 1, activation=_silu, eps=eps)
            )
        i = len(self.layers)
        depthwise = _sequential(
            store,
            f"{name}.block.{i}",
            expanded,
            expanded,
            kernel,
            stride,
            depthwise=True,
            activation=_silu,
            eps=eps,
        )
        squeeze = arch.squeeze_channels(in_ch)
        se = SqueezeExcitation(store, f"{name}.block.{i + 1}", expanded, squeeze)
        project = _sequential(store, f"{name}.block.{i + 2}", expanded, out_ch, 1, eps=eps)
        self.layers += [depthwise, lambda x, _training: se(x), project]

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        out = x
        for layer in self.layers:
            out = layer(out, training)
        return out + x if self.use_residual else out


class EfficientNetB0:
    def __init__(self, store: ParamStore, num_classes: int, dropout_scale: float) -> None:
        self.store = store
        self.dropout = arch.EFFICIENTNET_B0_DROPOUT * dropout_scale
        eps, stem, head = _EFFNET_BN_EPS, arch.EFFICIENTNET_B0_STEM, arch.EFFICIENTNET_B0_HEAD
        self.stem = _sequential(store, "features.0", 3, stem, 3, 2, activation=_silu, eps=eps)
        self.blocks: list[MBConv] = []
        stages = arch.EFFICIENTNET_B0_STAGES
        for stage, (expand, kernel, stride, in_ch, out_ch, repeats) in enumerate(stages, start=1):
            for i in range(repeats):
                self.blocks.append(
                    MBConv(
                        store,
                        f"features.{stage}.{i}",
                        in_ch if i == 0 else out_ch,
                        out_ch,
                        expand,
                        kernel,
                        stride if i == 0 else 1,
                    )
                )
        name, last = f"features.{len(stages) + 1}", stages[-1].out_channels
        self.head = _sequential(store, name, last, head, 1, activation=_silu, eps=eps)
        self.classifier = Dense(store, "classifier.1", head, num_classes)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        x = self.stem(x, training)
        for block in self.blocks:
            x = block(x, training)
        x = global_avg_pool(self.head(x, training))
        return self.classifier(dropout(x, self.dropout, training))


# ---------------------------------------------------------------------------------------- LSTM


class LSTMClassifier:
    """IMDB-style sentiment model: embedding -> one-layer LSTM -> last hidden state -> linear."""

    def __init__(self, store: ParamStore, num_classes: int) -> None:
        self.store = store
        self.embedding = Embedding(store, "embedding", LSTM_VOCAB_SIZE, LSTM_EMBED_DIM)
        self.lstm = LSTM(store, "lstm", LSTM_EMBED_DIM, LSTM_HIDDEN_SIZE)
        self.fc = Dense(store, "fc", LSTM_HIDDEN_SIZE, num_classes)

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        """`x`: int64 token ids, (batch, seq_len)."""
        return self.fc(self.lstm(self.embedding(x), training))


# ------------------------------------------------------------------------------------ public API

_Builder = Callable[[ParamStore, int, float], Model]
_BUILDERS: dict[str, _Builder] = {
    "lenet": LeNet,
    "resnet18": lambda s, n, _d: ResNet(s, arch.RESNETS["resnet18"], n),
    "resnet50": lambda s, n, _d: ResNet(s, arch.RESNETS["resnet50"], n),
    "resnet152": lambda s, n, _d: ResNet(s, arch.RESNETS["resnet152"], n),
    "vgg16": VGG16,
    "mobilenet_v2": MobileNetV2,
    "efficientnet_b0": EfficientNetB0,
    "lstm": lambda s, n, _d: LSTMClassifier(s, n),
}


def build_model(
    name: str,
    *,
    dtype: tf.DType = tf.float32,
    seed: int = 0,
    device: str = "/CPU:0",
    with_dropout: bool = True,
) -> Model:
    """A freshly initialised model, reproducible from `seed`, its variables on `device`.
    `with_dropout=False` sets every dropout rate to 0 (equivalence checks)."""
    check_name(name)
    store = ParamStore(dtype, seed, on_gpu="GPU" in device.upper())
    with tf.device(device):
        return _BUILDERS[name](store, NUM_CLASSES[name], 1.0 if with_dropout else 0.0)


@dataclass(frozen=True)
class Batch:
    inputs: tf.Tensor  # NHWC images in the model dtype, or int64 token ids (batch, seq_len)
    labels: tf.Tensor  # int64 (batch,)


def example_batch(
    name: str,
    batch_size: int,
    *,
    image_size: int = 224,
    seq_len: int = 200,
    dtype: tf.DType = tf.float32,
    seed: int = 0,
    device: str = "/CPU:0",
) -> Batch:
    """Synthetic inputs and labels drawn on `device` from `seed`; lenet always gets 1x28x28."""
    check_name(name)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    with tf.device(device):
        rng = tf.random.Generator.from_seed(seed)
        if name == "lstm":
            shape = (batch_size, seq_len)
            inputs = rng.uniform(shape, 0, LSTM_VOCAB_SIZE, dtype=tf.int64)
        else:
            if name != "lenet" and image_size < arch.MIN_IMAGE_SIZE:
                raise ValueError(f"image_size must be >= 32 for {name}, got {image_size}")
            side, channels = (LENET_IMAGE_SIZE, 1) if name == "lenet" else (image_size, 3)
            inputs = rng.normal((batch_size, side, side, channels), dtype=dtype)
        labels = rng.uniform((batch_size,), 0, NUM_CLASSES[name], dtype=tf.int64)
    return Batch(inputs, labels)


def batch_for(
    name: str,
    batch_size: int,
    params: Mapping[str, int],
    *,
    dtype: tf.DType,
    seed: int,
    device: str,
) -> Batch:
    """example_batch with the sizes a workload's parameters set (image_size, seq_len)."""
    return example_batch(
        name,
        batch_size,
        image_size=params.get("image_size", 224),
        seq_len=params.get("seq_len", 200),
        dtype=dtype,
        seed=seed,
        device=device,
    )
