"""The catalogue's models in pure JAX, layer for layer as ``fwbench.torch_plugin.models``.

Same layer order, channels, strides, symmetric paddings, bias flags, BatchNorm epsilons and
dropout placement as the PyTorch reference (itself torchvision's layout), hence the same
parameter counts, output shapes and FLOPs. Parameter names are the PyTorch ``state_dict``
keys. Each model is a forward function over a `Scope` (see layers.py); this module turns it
into ``init(key) -> (params, state)`` and ``apply(params, state, x, train) -> (logits, state)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from fwbench.jax_plugin.layers import (
    Array,
    FlatDenseLayout,
    ParamSpec,
    Scope,
    adaptive_avg_pool,
    batch_norm,
    collect_specs,
    conv2d,
    dense,
    dropout,
    embedding,
    global_avg_pool,
    lstm_last_hidden,
    max_pool,
    relu6,
    run_forward,
)

MODEL_NAMES: tuple[str, ...] = (
    "lenet",
    "resnet18",
    "resnet50",
    "resnet152",
    "vgg16",
    "mobilenet_v2",
    "efficientnet_b0",
    "lstm",
)
IMAGENET_CLASSES = 1000
NUM_CLASSES = dict.fromkeys(MODEL_NAMES, IMAGENET_CLASSES) | {"lenet": 10, "lstm": 2}
LENET_IMAGE_SIZE = 28
LSTM_VOCAB_SIZE = 20_000
LSTM_EMBED_DIM = 128
LSTM_HIDDEN_SIZE = 128
EFFNET_BN_EPS = 1e-3  # torchvision builds EfficientNet (v1) with BatchNorm2d(eps=1e-3)

Forward = Callable[[Scope, Array], Array]
Activation = Callable[[Array], Array]
Variables = dict[str, Array]


def _check_name(name: str) -> None:
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}")


# --------------------------------------------------------------------------------------- LeNet


def _lenet(s: Scope, x: Array) -> Array:
    f, c = s.child("features"), s.child("classifier")
    x = max_pool(jax.nn.relu(conv2d(f.child(0), x, 6, 5, padding=2, bias=True)), 2, 2)
    x = max_pool(jax.nn.relu(conv2d(f.child(3), x, 16, 5, bias=True)), 2, 2)
    x = x.reshape(x.shape[0], -1)  # (H, W, C) order; FlatDenseLayout maps it to PyTorch's
    x = jax.nn.relu(dense(c.child(0), x, 120, FlatDenseLayout(16, 5, 5)))
    x = jax.nn.relu(dense(c.child(2), x, 84))
    return dense(c.child(4), x, NUM_CLASSES["lenet"])


# -------------------------------------------------------------------------------------- ResNet


def _downsample(s: Scope, x: Array, out_ch: int, stride: int) -> Array:
    d = s.child("downsample")
    return batch_norm(d.child(1), conv2d(d.child(0), x, out_ch, 1, stride=stride))


def _basic_block(s: Scope, x: Array, planes: int, stride: int, project: bool) -> Array:
    out = conv2d(s.child("conv1"), x, planes, 3, stride=stride, padding=1)
    out = jax.nn.relu(batch_norm(s.child("bn1"), out))
    out = batch_norm(s.child("bn2"), conv2d(s.child("conv2"), out, planes, 3, padding=1))
    # The shortcut is declared after the main path, keeping PyTorch's state_dict order.
    identity = _downsample(s, x, planes, stride) if project else x
    return jax.nn.relu(out + identity)


def _bottleneck(s: Scope, x: Array, planes: int, stride: int, project: bool) -> Array:
    """ResNet v1.5, as torchvision: the stride sits on the 3x3 conv."""
    out = jax.nn.relu(batch_norm(s.child("bn1"), conv2d(s.child("conv1"), x, planes, 1)))
    out = conv2d(s.child("conv2"), out, planes, 3, stride=stride, padding=1)
    out = jax.nn.relu(batch_norm(s.child("bn2"), out))
    out = batch_norm(s.child("bn3"), conv2d(s.child("conv3"), out, planes * 4, 1))
    identity = _downsample(s, x, planes * 4, stride) if project else x
    return jax.nn.relu(out + identity)


Block = Callable[[Scope, Array, int, int, bool], Array]


def _resnet(block: Block, expansion: int, layers: tuple[int, ...]) -> Forward:
    def forward(s: Scope, x: Array) -> Array:
        x = conv2d(s.child("conv1"), x, 64, 7, stride=2, padding=3)
        x = max_pool(jax.nn.relu(batch_norm(s.child("bn1"), x)), 3, 2, padding=1)
        for stage, (planes, blocks) in enumerate(zip((64, 128, 256, 512), layers, strict=True)):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                # A projection shortcut whenever the block changes resolution or width.
                project = i == 0 and (stride != 1 or x.shape[-1] != planes * expansion)
                x = block(s.child(f"layer{stage + 1}", i), x, planes, stride, project)
        return dense(s.child("fc"), global_avg_pool(x), IMAGENET_CLASSES)

    return forward


# ----------------------------------------------------------------------------------------- VGG

# torchvision's configuration "D"; 0 stands for a 2x2 max-pool ("M").
_VGG16_CFG = (64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0)


def _vgg16(s: Scope, x: Array) -> Array:
    f, c = s.child("features"), s.child("classifier")
    index = 0  # position in torchvision's features Sequential (conv, ReLU, pool all count)
    for width in _VGG16_CFG:
        if width == 0:
            x = max_pool(x, 2, 2)
            index += 1
        else:
            x = jax.nn.relu(conv2d(f.child(index), x, width, 3, padding=1, bias=True))
            index += 2
    x = adaptive_avg_pool(x, 7)
    x = x.reshape(x.shape[0], -1)
    x = dropout(s, jax.nn.relu(dense(c.child(0), x, 4096, FlatDenseLayout(512, 7, 7))), 0.5)
    x = dropout(s, jax.nn.relu(dense(c.child(3), x, 4096)), 0.5)
    return dense(c.child(6), x, IMAGENET_CLASSES)


# ---------------------------------------------------------------- MobileNetV2 / EfficientNet-B0


def _conv_bn_act(
    s: Scope,
    x: Array,
    out_ch: int,
    kernel: int,
    *,
    stride: int = 1,
    groups: int = 1,
    activation: Activation | None = relu6,
    eps: float = 1e-5,
) -> Array:
    """torchvision's Conv2dNormActivation: bias-free conv (child 0), BatchNorm (child 1)."""
    padding = (kernel - 1) // 2
    x = conv2d(s.child(0), x, out_ch, kernel, stride=stride, padding=padding, groups=groups)
    x = batch_norm(s.child(1), x, eps)
    return x if activation is None else activation(x)


def _inverted_residual(s: Scope, x: Array, out_ch: int, stride: int, expand: int) -> Array:
    """1x1 expand -> 3x3 depthwise -> linear 1x1 projection (+ identity)."""
    in_ch = x.shape[-1]
    hidden = in_ch * expand
    c = s.child("conv")
    index, y = 0, x
    if expand != 1:
        y = _conv_bn_act(c.child(0), y, hidden, 1)
        index = 1
    y = _conv_bn_act(c.child(index), y, hidden, 3, stride=stride, groups=hidden)
    y = batch_norm(c.child(index + 2), conv2d(c.child(index + 1), y, out_ch, 1))
    return x + y if stride == 1 and in_ch == out_ch else y


# (expand ratio t, output channels c, repeats n, first stride s), as torchvision.
_MOBILENET_V2_CFG = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def _mobilenet_v2(s: Scope, x: Array) -> Array:
    f = s.child("features")
    x = _conv_bn_act(f.child(0), x, 32, 3, stride=2)
    index = 1
    for expand, out_ch, repeats, stride in _MOBILENET_V2_CFG:
        for i in range(repeats):
            x = _inverted_residual(f.child(index), x, out_ch, stride if i == 0 else 1, expand)
            index += 1
    x = global_avg_pool(_conv_bn_act(f.child(index), x, 1280, 1))
    return dense(s.child("classifier", 1), dropout(s, x, 0.2), IMAGENET_CLASSES)


def _squeeze_excitation(s: Scope, x: Array, squeeze: int) -> Array:
    """Channel gating with biased 1x1 convs on the pooled 1x1 map."""
    scale = jnp.mean(x, axis=(1, 2), keepdims=True)
    scale = jax.nn.silu(conv2d(s.child("fc1"), scale, squeeze, 1, bias=True))
    scale = jax.nn.sigmoid(conv2d(s.child("fc2"), scale, x.shape[-1], 1, bias=True))
    return x * scale


def _mbconv(s: Scope, x: Array, out_ch: int, expand: int, kernel: int, stride: int) -> Array:
    """EfficientNet block without stochastic depth (see the torch plugin's MBConv)."""
    in_ch = x.shape[-1]
    expanded = in_ch * expand
    b = s.child("block")
    index, y = 0, x
    conv_bn_silu = functools.partial(_conv_bn_act, activation=jax.nn.silu, eps=EFFNET_BN_EPS)
    if expanded != in_ch:
        y = conv_bn_silu(b.child(0), y, expanded, 1)
        index = 1
    y = conv_bn_silu(b.child(index), y, expanded, kernel, stride=stride, groups=expanded)
    # torchvision sizes the squeeze from the block's *input* width, not the expanded one.
    y = _squeeze_excitation(b.child(index + 1), y, max(1, in_ch // 4))
    y = _conv_bn_act(b.child(index + 2), y, out_ch, 1, activation=None, eps=EFFNET_BN_EPS)
    return y + x if stride == 1 and in_ch == out_ch else y


# (expand ratio, kernel, first stride, output channels, repeats) for B0.
_EFFICIENTNET_B0_CFG = (
    (1, 3, 1, 16, 1),
    (6, 3, 2, 24, 2),
    (6, 5, 2, 40, 2),
    (6, 3, 2, 80, 3),
    (6, 5, 1, 112, 3),
    (6, 5, 2, 192, 4),
    (6, 3, 1, 320, 1),
)


def _efficientnet_b0(s: Scope, x: Array) -> Array:
    f = s.child("features")
    x = _conv_bn_act(f.child(0), x, 32, 3, stride=2, activation=jax.nn.silu, eps=EFFNET_BN_EPS)
    for stage, (expand, kernel, stride, out_ch, repeats) in enumerate(_EFFICIENTNET_B0_CFG, 1):
        for i in range(repeats):
            x = _mbconv(f.child(stage, i), x, out_ch, expand, kernel, stride if i == 0 else 1)
    x = _conv_bn_act(f.child(8), x, 1280, 1, activation=jax.nn.silu, eps=EFFNET_BN_EPS)
    x = dropout(s, global_avg_pool(x), 0.2)
    return dense(s.child("classifier", 1), x, IMAGENET_CLASSES)


# ---------------------------------------------------------------------------------------- LSTM


def _lstm(s: Scope, tokens: Array) -> Array:
    x = embedding(s.child("embedding"), tokens, LSTM_VOCAB_SIZE, LSTM_EMBED_DIM)
    h = lstm_last_hidden(s.child("lstm"), x, LSTM_HIDDEN_SIZE)
    return dense(s.child("fc"), h, NUM_CLASSES["lstm"])


# ------------------------------------------------------------------------------------ public API

_FORWARDS: dict[str, Forward] = {
    "lenet": _lenet,
    "resnet18": _resnet(_basic_block, 1, (2, 2, 2, 2)),
    "resnet50": _resnet(_bottleneck, 4, (3, 4, 6, 3)),
    "resnet152": _resnet(_bottleneck, 4, (3, 8, 36, 3)),
    "vgg16": _vgg16,
    "mobilenet_v2": _mobilenet_v2,
    "efficientnet_b0": _efficientnet_b0,
    "lstm": _lstm,
}


def input_struct(
    name: str,
    batch_size: int,
    *,
    image_size: int = 224,
    seq_len: int = 200,
    dtype: DTypeLike | None = None,
) -> jax.ShapeDtypeStruct:
    """Shape and dtype of a model's input batch: NHWC images or (batch, seq_len) token ids."""
    _check_name(name)
    if name == "lstm":
        return jax.ShapeDtypeStruct((batch_size, seq_len), jnp.int32)
    dtype = jnp.float32 if dtype is None else dtype
    if name == "lenet":
        return jax.ShapeDtypeStruct((batch_size, LENET_IMAGE_SIZE, LENET_IMAGE_SIZE, 1), dtype)
    if image_size < 32:
        # Five stride-2 stages: below 32 pixels the map vanishes (vgg16 fails outright).
        raise ValueError(f"image_size must be >= 32 for {name}, got {image_size}")
    return jax.ShapeDtypeStruct((batch_size, image_size, image_size, 3), dtype)


@functools.cache
def param_specs(name: str) -> dict[str, ParamSpec]:
    """Every variable of `name` (trainable or not) in PyTorch's state_dict order."""
    return collect_specs(_FORWARDS[name], input_struct(name, 1, image_size=32, seq_len=1))


@dataclass(frozen=True)
class Model:
    name: str

    def __post_init__(self) -> None:
        _check_name(self.name)

    @property
    def specs(self) -> dict[str, ParamSpec]:
        return param_specs(self.name)

    @property
    def num_classes(self) -> int:
        return NUM_CLASSES[self.name]

    def init(self, key: Array, dtype: DTypeLike = jnp.float32) -> tuple[Variables, Variables]:
        """(trainable params, BatchNorm running statistics), freshly drawn from `key`."""
        return _split(self.name, init_variables(self.specs, key, dtype))

    def apply(
        self,
        params: Mapping[str, Array],
        state: Mapping[str, Array],
        x: Array,
        *,
        train: bool,
        rng: Array | None = None,
    ) -> tuple[Array, Variables]:
        """(logits, state after the pass). `rng` enables dropout in training."""
        return run_forward(_FORWARDS[self.name], params, state, x, train=train, rng=rng)

    def trainable_count(self) -> int:
        return sum(int(np.prod(s.shape)) for s in self.specs.values() if s.trainable)

    def to_canonical(
        self, params: Mapping[str, Array], state: Mapping[str, Array]
    ) -> dict[str, np.ndarray]:
        """PyTorch-layout float32 numpy arrays keyed by state_dict names."""
        merged = {**params, **state}
        return {
            name: spec.layout.to_canonical(np.asarray(merged[name], np.float32))
            for name, spec in self.specs.items()
        }

    def from_canonical(
        self, weights: Mapping[str, np.ndarray], dtype: DTypeLike = jnp.float32
    ) -> tuple[Variables, Variables]:
        """Loads canonical weights; every key must be known and every variable assigned."""
        specs = self.specs
        unknown, missing = sorted(set(weights) - set(specs)), sorted(set(specs) - set(weights))
        if unknown or missing:
            raise ValueError(f"{self.name}: unknown weights {unknown}, missing weights {missing}")
        arrays: Variables = {}
        for name, spec in specs.items():
            given = np.asarray(weights[name])
            expected = spec.layout.canonical_shape(spec.shape)
            if given.shape != expected:
                raise ValueError(f"{self.name}: {name} has shape {given.shape}, not {expected}")
            native = np.ascontiguousarray(spec.layout.from_canonical(given))
            arrays[name] = jnp.asarray(native, dtype)
        return _split(self.name, arrays)


def init_variables(specs: Mapping[str, ParamSpec], key: Array, dtype: DTypeLike) -> Variables:
    """Draws every variable of `specs` from `key`: one uniform and one normal stream, cut in
    declaration order and scaled per variable, then placed on the default device as `dtype`.
    Drawing two long streams and slicing them on the host is seconds faster than compiling
    one random op per variable shape (or one XLA program with hundreds of outputs)."""
    counts = {"uniform": 0, "normal": 0}
    for spec in specs.values():
        if spec.init.distribution in counts:
            counts[spec.init.distribution] += int(np.prod(spec.shape))
    uniform_key, normal_key = jax.random.split(key)
    streams = {
        "uniform": np.asarray(jax.random.uniform(uniform_key, (counts["uniform"],), minval=-1)),
        "normal": np.asarray(jax.random.normal(normal_key, (counts["normal"],))),
    }
    offsets = dict.fromkeys(streams, 0)
    variables: Variables = {}
    for name, spec in specs.items():
        init = spec.init
        if init.distribution == "constant":
            host = np.full(spec.shape, init.scale, np.float32)
        else:
            size, start = int(np.prod(spec.shape)), offsets[init.distribution]
            offsets[init.distribution] = start + size
            host = streams[init.distribution][start : start + size].reshape(spec.shape)
            host = host * np.float32(init.scale)
        variables[name] = jnp.asarray(host, dtype)
    return variables


def _split(name: str, variables: Mapping[str, Array]) -> tuple[Variables, Variables]:
    specs = param_specs(name)
    params = {k: v for k, v in variables.items() if specs[k].trainable}
    state = {k: v for k, v in variables.items() if not specs[k].trainable}
    return params, state


def example_batch(
    name: str,
    batch_size: int,
    key: Array,
    *,
    image_size: int = 224,
    seq_len: int = 200,
    dtype: DTypeLike = jnp.float32,
) -> tuple[Array, Array]:
    """Synthetic (inputs, labels) drawn on the default device: N(0, 1) NHWC images (or token
    ids in [0, vocab)) and int32 labels in [0, classes)."""
    struct = input_struct(name, batch_size, image_size=image_size, seq_len=seq_len, dtype=dtype)
    input_key, label_key = jax.random.split(key)
    if name == "lstm":
        inputs = jax.random.randint(input_key, struct.shape, 0, LSTM_VOCAB_SIZE, jnp.int32)
    else:
        inputs = jax.random.normal(input_key, struct.shape, struct.dtype)
    labels = jax.random.randint(label_key, (batch_size,), 0, NUM_CLASSES[name], jnp.int32)
    return inputs, labels
