"""The catalogue's models in pure JAX, layer for layer as ``fwbench.torch_plugin.models``.

Same layer order, channels, strides, symmetric paddings, bias flags, BatchNorm epsilons and
dropout placement as the PyTorch reference (itself torchvision's layout), hence the same
parameter counts, output shapes and FLOPs. Parameter names are the PyTorch ``state_dict``
keys. Each model is a forward function over a `Scope` (see layers.py); this module turns it
into ``init(key) -> (params, state)`` and ``apply(params, state, x, train) -> (logits, state)``.
The numbers (channels, depths, strides, stage tables) come from ``fwbench.runtime.architectures``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array
from jax.typing import DTypeLike

from fwbench.jax_plugin.layers import (
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
from fwbench.runtime import architectures as arch
from fwbench.runtime.architectures import (
    IMAGENET_CLASSES,
    LENET_IMAGE_SIZE,
    LSTM_EMBED_DIM,
    LSTM_HIDDEN_SIZE,
    LSTM_VOCAB_SIZE,
    NUM_CLASSES,
)
from fwbench.runtime.architectures import check_model_name as _check_name
from fwbench.runtime.plugin import WorkloadSpec

MODEL_NAMES = arch.MODEL_NAMES  # re-exported: plugin.py and the tests read it here
EFFNET_BN_EPS = arch.EFFICIENTNET_BN_EPS

Forward = Callable[[Scope, Array], Array]
Activation = Callable[[Array], Array]
Variables = dict[str, Array]


# --------------------------------------------------------------------------------------- LeNet


def _lenet(s: Scope, x: Array) -> Array:
    f, c = s.child("features"), s.child("classifier")
    (c1, c2), (h1, h2) = arch.LENET_CONVS, arch.LENET_HIDDEN
    x = conv2d(f.child(0), x, c1.channels, c1.kernel, padding=c1.padding, bias=True)
    x = max_pool(jax.nn.relu(x), 2, 2)
    x = conv2d(f.child(3), x, c2.channels, c2.kernel, padding=c2.padding, bias=True)
    x = max_pool(jax.nn.relu(x), 2, 2)
    x = x.reshape(x.shape[0], -1)  # (H, W, C) order; FlatDenseLayout maps it to PyTorch's
    x = jax.nn.relu(dense(c.child(0), x, h1, FlatDenseLayout(*arch.LENET_FEATURES)))
    x = jax.nn.relu(dense(c.child(2), x, h2))
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
    out_ch = planes * arch.BLOCK_EXPANSION["bottleneck"]
    out = batch_norm(s.child("bn3"), conv2d(s.child("conv3"), out, out_ch, 1))
    identity = _downsample(s, x, out_ch, stride) if project else x
    return jax.nn.relu(out + identity)


Block = Callable[[Scope, Array, int, int, bool], Array]


_BLOCKS: dict[str, Block] = {"basic": _basic_block, "bottleneck": _bottleneck}


def _resnet(spec: arch.ResNetSpec) -> Forward:
    block, expansion = _BLOCKS[spec.block], arch.BLOCK_EXPANSION[spec.block]

    def forward(s: Scope, x: Array) -> Array:
        x = conv2d(s.child("conv1"), x, arch.RESNET_STEM_CHANNELS, 7, stride=2, padding=3)
        x = max_pool(jax.nn.relu(batch_norm(s.child("bn1"), x)), 3, 2, padding=1)
        stages = zip(arch.RESNET_STAGE_WIDTHS, spec.depths, strict=True)
        for stage, (planes, blocks) in enumerate(stages):
            for i in range(blocks):
                stride = 2 if stage > 0 and i == 0 else 1
                # A projection shortcut whenever the block changes resolution or width.
                project = i == 0 and (stride != 1 or x.shape[-1] != planes * expansion)
                x = block(s.child(f"layer{stage + 1}", i), x, planes, stride, project)
        return dense(s.child("fc"), global_avg_pool(x), IMAGENET_CLASSES)

    return forward


# ----------------------------------------------------------------------------------------- VGG


def _vgg16(s: Scope, x: Array) -> Array:
    f, c = s.child("features"), s.child("classifier")
    index = 0  # position in torchvision's features Sequential (conv, ReLU, pool all count)
    for width in arch.VGG16_CONFIG:
        if width == arch.POOL:
            x = max_pool(x, 2, 2)
            index += 1
        else:
            x = jax.nn.relu(conv2d(f.child(index), x, width, 3, padding=1, bias=True))
            index += 2
    pooled, hidden, rate = arch.VGG_POOLED_SIZE, arch.VGG_HIDDEN, arch.VGG_DROPOUT
    layout = FlatDenseLayout(x.shape[-1], pooled, pooled)
    x = adaptive_avg_pool(x, pooled)
    x = x.reshape(x.shape[0], -1)
    x = dropout(s, jax.nn.relu(dense(c.child(0), x, hidden, layout)), rate)
    x = dropout(s, jax.nn.relu(dense(c.child(3), x, hidden)), rate)
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
    eps: float = arch.BN_EPS,
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


def _mobilenet_v2(s: Scope, x: Array) -> Array:
    f = s.child("features")
    x = _conv_bn_act(f.child(0), x, arch.MOBILENET_V2_STEM, 3, stride=2)
    index = 1
    for expand, out_ch, repeats, stride in arch.MOBILENET_V2_STAGES:
        for i in range(repeats):
            x = _inverted_residual(f.child(index), x, out_ch, stride if i == 0 else 1, expand)
            index += 1
    x = global_avg_pool(_conv_bn_act(f.child(index), x, arch.MOBILENET_V2_HEAD, 1))
    x = dropout(s, x, arch.MOBILENET_V2_DROPOUT)
    return dense(s.child("classifier", 1), x, IMAGENET_CLASSES)


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
    y = _squeeze_excitation(b.child(index + 1), y, arch.squeeze_channels(in_ch))
    y = _conv_bn_act(b.child(index + 2), y, out_ch, 1, activation=None, eps=EFFNET_BN_EPS)
    return y + x if stride == 1 and in_ch == out_ch else y


def _efficientnet_b0(s: Scope, x: Array) -> Array:
    f = s.child("features")
    conv_bn_silu = functools.partial(_conv_bn_act, activation=jax.nn.silu, eps=EFFNET_BN_EPS)
    x = conv_bn_silu(f.child(0), x, arch.EFFICIENTNET_B0_STEM, 3, stride=2)
    stages = arch.EFFICIENTNET_B0_STAGES
    # Each block reads its input width from x, so the table's in_channels go unused here.
    for number, (expand, kernel, stride, _, out_ch, repeats) in enumerate(stages, 1):
        for i in range(repeats):
            x = _mbconv(f.child(number, i), x, out_ch, expand, kernel, stride if i == 0 else 1)
    x = conv_bn_silu(f.child(len(stages) + 1), x, arch.EFFICIENTNET_B0_HEAD, 1)
    x = dropout(s, global_avg_pool(x), arch.EFFICIENTNET_B0_DROPOUT)
    return dense(s.child("classifier", 1), x, IMAGENET_CLASSES)


# ---------------------------------------------------------------------------------------- LSTM


def _lstm(s: Scope, tokens: Array) -> Array:
    x = embedding(s.child("embedding"), tokens, LSTM_VOCAB_SIZE, LSTM_EMBED_DIM)
    h = lstm_last_hidden(s.child("lstm"), x, LSTM_HIDDEN_SIZE)
    return dense(s.child("fc"), h, NUM_CLASSES["lstm"])


# ------------------------------------------------------------------------------------ public API

_FORWARDS: dict[str, Forward] = {
    "lenet": _lenet,
    "resnet18": _resnet(arch.RESNETS["resnet18"]),
    "resnet50": _resnet(arch.RESNETS["resnet50"]),
    "resnet152": _resnet(arch.RESNETS["resnet152"]),
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
    if image_size < arch.MIN_IMAGE_SIZE:
        raise ValueError(f"image_size must be >= 32 for {name}, got {image_size}")
    return jax.ShapeDtypeStruct((batch_size, image_size, image_size, 3), dtype)


@functools.cache
def param_specs(name: str) -> dict[str, ParamSpec]:
    """Every variable of `name` (trainable or not) in PyTorch's state_dict order."""
    smallest = input_struct(name, 1, image_size=arch.MIN_IMAGE_SIZE, seq_len=1)
    return collect_specs(_FORWARDS[name], smallest)


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


# One seed, separate streams: weights from PRNGKey(seed) itself (as canonical_weights), the
# dropout key from a fold of it, synthetic data from data_key(seed).
_DROPOUT_STREAM = 1


def data_key(seed: int) -> Array:
    """The key synthetic inputs are drawn from. XLA's RngBitGenerator ("rbg") writes its
    output directly; the default threefry key peaks at about 4x the array being drawn (a
    2 GiB batch needed 8 GiB), which would make a batch-size sweep run out of memory while
    building, long before the step itself would."""
    return jax.random.key(seed, impl="rbg")


def dropout_key(seed: int) -> Array:
    return jax.random.fold_in(jax.random.PRNGKey(seed), _DROPOUT_STREAM)


def synthetic_training(
    model: Model, spec: WorkloadSpec, dtype: DTypeLike, *, data_seed: int | None = None
) -> tuple[Variables, Variables, Array, Array]:
    """(params, state, inputs, labels) for `spec`: weights drawn from its seed, a synthetic
    batch from `data_seed` (default the seed; a rank of a world draws its own shard), on the
    default device."""
    params, state = model.init(jax.random.PRNGKey(spec.seed), dtype)
    inputs, labels = example_batch(
        model.name,
        spec.batch_size,
        data_key(spec.seed if data_seed is None else data_seed),
        image_size=spec.params.get("image_size", 224),
        seq_len=spec.params.get("seq_len", 200),
        dtype=dtype,
    )
    return params, state, inputs, labels
