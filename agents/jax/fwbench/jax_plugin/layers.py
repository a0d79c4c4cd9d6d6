"""Pure-JAX layers with parameters in one flat dict keyed by PyTorch ``state_dict`` names.

A model is one forward function ``forward(scope, x)``. The `Scope` it receives either collects
parameter specs (names, shapes, initialisers, layouts; run under ``jax.eval_shape`` so nothing
is computed) or serves the arrays of a flat parameter dict. The architecture is therefore
written once, and canonical weights are a per-array layout conversion, with no name mapping.

Layout: activations NHWC, convolution kernels HWIO, dense kernels (in, out) -- XLA's fast
path on CPU. The PyTorch (canonical) layouts differ; each parameter carries a `Layout` that
converts between the two.

Initial distributions are PyTorch's defaults (speed does not depend on them, but equal
distributions keep first losses comparable across frameworks): weights and biases
U(+-1/sqrt(fan_in)), BatchNorm weight 1 and bias 0, embedding N(0, 1).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

# PyTorch's BatchNorm defaults: running = (1 - momentum) * running + momentum * batch.
from fwbench.runtime.architectures import BN_EPS, BN_MOMENTUM

_CONV_DIMENSIONS = ("NHWC", "HWIO", "NHWC")


# ------------------------------------------------------------------------------------- layouts


class Layout:
    """Identity: biases, BatchNorm vectors, embeddings share PyTorch's layout."""

    def to_canonical(self, array: np.ndarray) -> np.ndarray:
        return array

    def from_canonical(self, array: np.ndarray) -> np.ndarray:
        return array

    def canonical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape


class ConvLayout(Layout):
    """HWIO here, OIHW (out, in/groups, kh, kw) in PyTorch."""

    def to_canonical(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, (3, 2, 0, 1))

    def from_canonical(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array, (2, 3, 1, 0))

    def canonical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        kh, kw, fan_in, out = shape
        return (out, fan_in, kh, kw)


class DenseLayout(Layout):
    """(in, out) here, (out, in) in PyTorch."""

    def to_canonical(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array)

    def from_canonical(self, array: np.ndarray) -> np.ndarray:
        return np.transpose(array)

    def canonical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape[::-1]


@dataclass(frozen=True)
class FlatDenseLayout(Layout):
    """A dense layer fed by a flattened (height, width, channels) map here; PyTorch flattens
    the same map as (channels, height, width), so the input rows are permuted as well."""

    channels: int
    height: int
    width: int

    def to_canonical(self, array: np.ndarray) -> np.ndarray:
        out = array.shape[1]
        hwc = array.reshape(self.height, self.width, self.channels, out)
        return np.transpose(hwc, (3, 2, 0, 1)).reshape(out, -1)

    def from_canonical(self, array: np.ndarray) -> np.ndarray:
        out = array.shape[0]
        chw = array.reshape(out, self.channels, self.height, self.width)
        return np.transpose(chw, (2, 3, 1, 0)).reshape(-1, out)

    def canonical_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape[::-1]


IDENTITY = Layout()
CONV = ConvLayout()
DENSE = DenseLayout()


# -------------------------------------------------------------------------------- initialisers


@dataclass(frozen=True)
class Init:
    """A variable's initial distribution: U(-scale, scale), N(0, scale^2) or the constant
    `scale`. Declarative rather than a function so that a whole model is drawn from one
    random stream per distribution (see models.init_variables): hundreds of separate random
    ops would each dispatch and compile."""

    distribution: str  # "uniform", "normal" or "constant"
    scale: float


def fan_in_uniform(fan_in: int) -> Init:
    """U(+-1/sqrt(fan_in)): PyTorch's kaiming_uniform_(a=sqrt(5)) for conv and linear weights
    (its gain sqrt(1/3) times sqrt(3/fan_in)) and its bias initialiser alike."""
    return Init("uniform", fan_in**-0.5)


ONES = Init("constant", 1.0)
ZEROS = Init("constant", 0.0)
EMBEDDING_INIT = Init("normal", 1.0)  # nn.Embedding's N(0, 1)


# ------------------------------------------------------------------------------------- scopes


@dataclass(frozen=True)
class ParamSpec:
    shape: tuple[int, ...]
    init: Init
    layout: Layout
    trainable: bool  # False for BatchNorm running statistics


@dataclass
class _Frame:
    """What every scope of one forward pass shares."""

    collecting: bool
    params: Mapping[str, Array]
    state: Mapping[str, Array]
    train: bool
    rng: Array | None  # dropout key; None disables dropout
    specs: dict[str, ParamSpec] = field(default_factory=dict)
    new_state: dict[str, Array] = field(default_factory=dict)
    dropout_calls: int = 0


class Scope:
    """A name prefix into a `_Frame`: ``scope.child("layer1", 0).param("weight", ...)``
    reads or declares ``layer1.0.weight``."""

    def __init__(self, frame: _Frame, prefix: str = "") -> None:
        self._frame = frame
        self._prefix = prefix

    @property
    def train(self) -> bool:
        return self._frame.train

    def child(self, *parts: str | int) -> Scope:
        path = ".".join(str(part) for part in parts)
        return Scope(self._frame, f"{self._prefix}{path}.")

    def _declare(self, name: str, spec: ParamSpec) -> Array:
        full = self._prefix + name
        if full in self._frame.specs:
            raise ValueError(f"parameter {full} declared twice")
        self._frame.specs[full] = spec
        return jnp.zeros(spec.shape, jnp.float32)

    def param(
        self, name: str, shape: tuple[int, ...], init: Init, layout: Layout = IDENTITY
    ) -> Array:
        if self._frame.collecting:
            return self._declare(name, ParamSpec(shape, init, layout, trainable=True))
        return self._frame.params[self._prefix + name]

    def state(self, name: str, shape: tuple[int, ...], init: Init) -> Array:
        """A non-trainable variable (BatchNorm running statistics)."""
        if self._frame.collecting:
            return self._declare(name, ParamSpec(shape, init, IDENTITY, trainable=False))
        return self._frame.state[self._prefix + name]

    def update_state(self, name: str, value: Array) -> None:
        self._frame.new_state[self._prefix + name] = value

    def dropout_key(self) -> Array | None:
        frame = self._frame
        if not frame.train or frame.rng is None:
            return None
        frame.dropout_calls += 1  # a distinct key per dropout layer
        return jax.random.fold_in(frame.rng, frame.dropout_calls)


def collect_specs(
    forward: Callable[[Scope, Array], Array], example: jax.ShapeDtypeStruct
) -> dict[str, ParamSpec]:
    """Every variable `forward` declares, in declaration order; traces shapes only."""
    frame = _Frame(True, {}, {}, train=False, rng=None)
    jax.eval_shape(lambda x: forward(Scope(frame), x), example)
    return frame.specs


def run_forward(
    forward: Callable[[Scope, Array], Array],
    params: Mapping[str, Array],
    state: Mapping[str, Array],
    x: Array,
    *,
    train: bool,
    rng: Array | None,
) -> tuple[Array, dict[str, Array]]:
    """(logits, state after the pass): training updates BatchNorm running statistics."""
    frame = _Frame(False, params, state, train=train, rng=rng)
    logits = forward(Scope(frame), x)
    return logits, {**state, **frame.new_state}


# ------------------------------------------------------------------------------------- layers


def conv2d(
    scope: Scope,
    x: Array,
    out_ch: int,
    kernel: int,
    *,
    stride: int = 1,
    padding: int = 0,
    groups: int = 1,
    bias: bool = False,
) -> Array:
    """PyTorch's Conv2d. Padding is explicit and symmetric: XLA's "SAME" pads stride-2 convs
    asymmetrically (more at the end), which would shift every window against PyTorch."""
    in_ch = x.shape[-1]
    shape = (kernel, kernel, in_ch // groups, out_ch)
    fan_in = in_ch // groups * kernel * kernel
    w = scope.param("weight", shape, fan_in_uniform(fan_in), CONV)
    y = lax.conv_general_dilated(
        x,
        w,
        window_strides=(stride, stride),
        padding=((padding, padding), (padding, padding)),
        dimension_numbers=_CONV_DIMENSIONS,
        feature_group_count=groups,
    )
    if bias:
        y = y + scope.param("bias", (out_ch,), fan_in_uniform(fan_in))
    return y


def dense(scope: Scope, x: Array, out: int, layout: Layout = DENSE) -> Array:
    """PyTorch's Linear; `layout` is FlatDenseLayout when x is a flattened feature map."""
    fan_in = x.shape[-1]
    w = scope.param("weight", (fan_in, out), fan_in_uniform(fan_in), layout)
    b = scope.param("bias", (out,), fan_in_uniform(fan_in))
    return x @ w + b


def batch_norm(scope: Scope, x: Array, eps: float = BN_EPS) -> Array:
    """PyTorch's BatchNorm2d over NHWC. Training normalises with the batch's biased variance
    and moves the running variance towards the unbiased one, as PyTorch does. Statistics are
    computed in float32 whatever the activation dtype."""
    channels = x.shape[-1]
    weight = scope.param("weight", (channels,), ONES)
    bias = scope.param("bias", (channels,), ZEROS)
    running_mean = scope.state("running_mean", (channels,), ZEROS)
    running_var = scope.state("running_var", (channels,), ONES)
    x32 = x.astype(jnp.float32)
    if scope.train:
        mean = jnp.mean(x32, axis=(0, 1, 2))
        var = jnp.mean(jnp.square(x32 - mean), axis=(0, 1, 2))
        count = x.size // channels
        unbiased = var * (count / max(count - 1, 1))
        scope.update_state("running_mean", _moving_average(running_mean, mean))
        scope.update_state("running_var", _moving_average(running_var, unbiased))
    else:
        mean = running_mean.astype(jnp.float32)
        var = running_var.astype(jnp.float32)
    scale = weight.astype(jnp.float32) * lax.rsqrt(var + eps)
    shift = bias.astype(jnp.float32) - mean * scale
    return (x32 * scale + shift).astype(x.dtype)


def _moving_average(running: Array, batch: Array) -> Array:
    moved = (1 - BN_MOMENTUM) * running.astype(jnp.float32) + BN_MOMENTUM * batch
    return moved.astype(running.dtype)


def max_pool(x: Array, kernel: int, stride: int, padding: int = 0) -> Array:
    """PyTorch's MaxPool2d (floor mode): padded positions hold -inf, so they never win."""
    pad = ((0, 0), (padding, padding), (padding, padding), (0, 0))
    # A concrete (numpy) identity lets JAX recognise the max monoid, which it can differentiate.
    init = np.array(-np.inf, x.dtype)
    window, strides = (1, kernel, kernel, 1), (1, stride, stride, 1)
    pooled: Array = lax.reduce_window(x, init, lax.max, window, strides, pad)
    return pooled


def global_avg_pool(x: Array) -> Array:
    """AdaptiveAvgPool2d(1) followed by flatten: (N, H, W, C) -> (N, C)."""
    return jnp.mean(x, axis=(1, 2))


def adaptive_pool_matrix(size: int, bins: int) -> np.ndarray:
    """(bins, size) averaging matrix of PyTorch's adaptive_avg_pool: bin i averages
    [floor(i*size/bins), ceil((i+1)*size/bins)). Bins may overlap or repeat an input."""
    matrix = np.zeros((bins, size), np.float32)
    for i in range(bins):
        start = (i * size) // bins
        end = -((-(i + 1) * size) // bins)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def adaptive_avg_pool(x: Array, bins: int) -> Array:
    """AdaptiveAvgPool2d((bins, bins)) for any input size, as two constant pooling matrices."""
    height, width = x.shape[1], x.shape[2]
    if height == bins and width == bins:
        return x  # the 224-pixel case: PyTorch's pooling is the identity there too
    rows = jnp.asarray(adaptive_pool_matrix(height, bins), x.dtype)
    cols = jnp.asarray(adaptive_pool_matrix(width, bins), x.dtype)
    return jnp.einsum("ih,jw,nhwc->nijc", rows, cols, x)


def dropout(scope: Scope, x: Array, rate: float) -> Array:
    """Inverted dropout as PyTorch: zero with probability `rate`, scale survivors by
    1/(1-rate); only while training and only when the pass was given a key."""
    key = scope.dropout_key()
    if key is None or rate == 0.0:
        return x
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros_like(x))


def relu6(x: Array) -> Array:
    return jnp.clip(x, 0, 6)


def embedding(scope: Scope, tokens: Array, vocab: int, dim: int) -> Array:
    table = scope.param("weight", (vocab, dim), EMBEDDING_INIT)
    return jnp.take(table, tokens, axis=0)


def lstm_last_hidden(scope: Scope, x: Array, hidden: int) -> Array:
    """One-layer LSTM over (batch, time, features) with ONE bias, gates i, f, g, o; returns
    the last hidden state. The input projection of every step is one matmul up front (as
    ATen's CPU LSTM does); only the recurrent matmul runs inside the scan."""
    init = fan_in_uniform(hidden)  # nn.LSTM's U(+-1/sqrt(hidden)) for every weight
    w_ih = scope.param("weight_ih_l0", (x.shape[-1], 4 * hidden), init, DENSE)
    w_hh = scope.param("weight_hh_l0", (hidden, 4 * hidden), init, DENSE)
    bias = scope.param("bias_l0", (4 * hidden,), init)
    projected = jnp.einsum("bti,ig->tbg", x, w_ih) + bias

    def cell(carry: tuple[Array, Array], gates_x: Array) -> tuple[tuple[Array, Array], None]:
        h, c = carry
        i, f, g, o = jnp.split(gates_x + h @ w_hh, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), None

    zeros = jnp.zeros((x.shape[0], hidden), x.dtype)
    (h, _), _ = lax.scan(cell, (zeros, zeros), projected)
    return h
