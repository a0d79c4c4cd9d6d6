"""The few building blocks the catalogue models need, on raw TensorFlow ops, NHWC.

Keras layers are avoided for the convolutional nets on purpose: Keras 3's BatchNormalization
does not use TensorFlow's fused kernel (FusedBatchNormV3 is ~2.5x faster in training on CPU),
and 'same' padding is asymmetric for stride 2 where PyTorch pads symmetrically. Plain
`tf.Variable`s plus `tf.nn` ops keep every layer exactly equal to its PyTorch counterpart.
The LSTM is the exception: Keras' LSTM layer is TensorFlow's fastest LSTM on CPU (measured
against BlockLSTMV2 and a tf.scan cell) and switches to cuDNN on a GPU.

Every variable is registered in a `ParamStore` under its PyTorch ``state_dict`` name together
with the two layout conversions, so canonical weights (see fwbench.runtime.reference) come and
go without per-model code.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import keras
import numpy as np
import tensorflow as tf

# PyTorch's BatchNorm defaults; BN_MOMENTUM is PyTorch's convention (Keras would call it 0.9).
from fwbench.runtime.architectures import BN_EPS, BN_MOMENTUM

Converter = Callable[[np.ndarray], np.ndarray]
Activation = Callable[[tf.Tensor], tf.Tensor]

# cuDNN rejects BatchNorm epsilons below CUDNN_BN_MIN_EPSILON (1e-5, and float32(1e-5) is a hair
# smaller); tf.nn.fused_batch_norm clamps to this value for the same reason.
_CUDNN_MIN_EPSILON = 1.001e-5


def _same(array: np.ndarray) -> np.ndarray:
    return array


def _transpose(array: np.ndarray) -> np.ndarray:
    return array.T


def _conv_to_canonical(array: np.ndarray) -> np.ndarray:
    return array.transpose(3, 2, 0, 1)  # (kh, kw, in, out) -> (out, in, kh, kw)


def _conv_from_canonical(array: np.ndarray) -> np.ndarray:
    return array.transpose(2, 3, 1, 0)


def _depthwise_swap(array: np.ndarray) -> np.ndarray:
    # (kh, kw, C, 1) <-> (C, 1, kh, kw): the same permutation both ways.
    return array.transpose(2, 3, 0, 1)


@dataclass(frozen=True)
class Slot:
    """One canonical weight: the variable holding it and its two layout conversions."""

    variable: tf.Variable
    trainable: bool
    to_canonical: Converter = _same
    from_canonical: Converter = _same


class ParamStore:
    """A model's variables by canonical name, filled in construction order as layers build."""

    def __init__(self, dtype: tf.DType, seed: int, on_gpu: bool = False) -> None:
        self.dtype = dtype
        # FusedBatchNormV3 takes its statistics in float32 whatever the activations are; it has
        # no float64 kernel, so float64 models use float64 statistics and unfused BatchNorm.
        self.norm_dtype = tf.float64 if dtype == tf.float64 else tf.float32
        self.on_gpu = on_gpu
        self.slots: dict[str, Slot] = {}
        self._seeds = np.random.default_rng(seed)

    def next_seed(self) -> int:
        """A fresh seed for one Keras initializer, reproducible from the store's seed."""
        return int(self._seeds.integers(0, 2**31 - 1))

    def new(
        self,
        name: str,
        shape: tuple[int, ...],
        initializer: keras.initializers.Initializer | str,
        *,
        trainable: bool = True,
        dtype: tf.DType | None = None,
        to_canonical: Converter = _same,
        from_canonical: Converter = _same,
    ) -> tf.Variable:
        # Initialise in float32, then cast: some Keras initializers have no bfloat16 path.
        init = keras.initializers.get(initializer)
        value = tf.cast(init(shape, dtype="float32"), dtype or self.dtype)
        variable = tf.Variable(value, trainable=trainable, name=name)
        self.add(name, Slot(variable, trainable, to_canonical, from_canonical))
        return variable

    def add(self, name: str, slot: Slot) -> None:
        if name in self.slots:
            raise ValueError(f"duplicate weight name {name}")
        self.slots[name] = slot

    def trainable_variables(self) -> list[tf.Variable]:
        return [slot.variable for slot in self.slots.values() if slot.trainable]

    def param_count(self) -> int:
        return sum(int(np.prod(v.shape)) for v in self.trainable_variables())

    def export(self) -> dict[str, np.ndarray]:
        """Canonical weights: PyTorch names and layouts, float32."""
        return {
            name: np.ascontiguousarray(slot.to_canonical(slot.variable.numpy()), dtype=np.float32)
            for name, slot in self.slots.items()
        }

    def load(self, weights: Mapping[str, np.ndarray]) -> None:
        """Assigns canonical weights; every name must match exactly, every shape too."""
        missing = sorted(set(self.slots) - set(weights))
        unknown = sorted(set(weights) - set(self.slots))
        if missing or unknown:
            raise ValueError(f"canonical weights mismatch: missing {missing}, unknown {unknown}")
        for name, slot in self.slots.items():
            value = slot.from_canonical(np.asarray(weights[name], dtype=np.float32))
            if tuple(value.shape) != tuple(slot.variable.shape):
                raise ValueError(
                    f"{name}: canonical shape {np.shape(weights[name])} does not fit "
                    f"variable shape {tuple(slot.variable.shape)}"
                )
            slot.variable.assign(tf.cast(value, slot.variable.dtype))


def _glorot(store: ParamStore) -> keras.initializers.Initializer:
    return keras.initializers.GlorotUniform(seed=store.next_seed())


def conv_padding(kernel: int, stride: int, pad: int) -> str | list[list[int]]:
    """PyTorch's symmetric `pad` as a TensorFlow padding argument.

    'SAME' equals it only for stride 1 and an odd kernel with pad == kernel // 2; for stride 2
    TensorFlow puts the extra row at the bottom only, so everything else is explicit."""
    if pad == 0:
        return "VALID"
    if stride == 1 and 2 * pad == kernel - 1:
        return "SAME"
    return [[0, 0], [pad, pad], [pad, pad], [0, 0]]


class Conv2D:
    """nn.Conv2d with groups 1 or depthwise (groups == in == out channels), NHWC."""

    def __init__(
        self,
        store: ParamStore,
        name: str,
        in_ch: int,
        out_ch: int,
        kernel: int,
        stride: int = 1,
        pad: int = 0,
        *,
        depthwise: bool = False,
        bias: bool = False,
    ) -> None:
        if depthwise and in_ch != out_ch:
            raise ValueError("a depthwise convolution keeps the channel count")
        self.depthwise = depthwise
        self.stride = stride
        self.padding = conv_padding(kernel, stride, pad)
        if depthwise:
            shape, to_c, from_c = (kernel, kernel, in_ch, 1), _depthwise_swap, _depthwise_swap
        else:
            shape, to_c, from_c = (
                (kernel, kernel, in_ch, out_ch),
                _conv_to_canonical,
                _conv_from_canonical,
            )
        self.weight = store.new(
            f"{name}.weight", shape, _glorot(store), to_canonical=to_c, from_canonical=from_c
        )
        self.bias = store.new(f"{name}.bias", (out_ch,), "zeros") if bias else None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        if self.depthwise:
            strides = [1, self.stride, self.stride, 1]
            y = tf.nn.depthwise_conv2d(x, self.weight, strides, self.padding)
        else:
            y = tf.nn.conv2d(x, self.weight, self.stride, self.padding)
        # A separate BiasAdd is what Grappler's remapper fuses into the convolution.
        return y if self.bias is None else tf.nn.bias_add(y, self.bias)


class BatchNorm:
    """nn.BatchNorm2d: batch statistics in training (running ones updated with momentum 0.1
    and the unbiased variance), running statistics in inference.

    FusedBatchNormV3 does both in one kernel: with `exponential_avg_factor` it returns the
    updated running mean and (Bessel-corrected) running variance directly."""

    def __init__(self, store: ParamStore, name: str, channels: int, eps: float = BN_EPS) -> None:
        dtype = store.norm_dtype
        self.fused = dtype != tf.float64
        self.eps = max(eps, _CUDNN_MIN_EPSILON) if store.on_gpu else eps
        self.gamma = store.new(f"{name}.weight", (channels,), "ones", dtype=dtype)
        self.beta = store.new(f"{name}.bias", (channels,), "zeros", dtype=dtype)
        self.mean = store.new(
            f"{name}.running_mean", (channels,), "zeros", trainable=False, dtype=dtype
        )
        self.var = store.new(
            f"{name}.running_var", (channels,), "ones", trainable=False, dtype=dtype
        )

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        return self._fused(x, training) if self.fused else self._unfused(x, training)

    def _fused(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        y, mean, var, *_ = tf.raw_ops.FusedBatchNormV3(
            x=x,
            scale=self.gamma,
            offset=self.beta,
            mean=self.mean,
            variance=self.var,
            epsilon=self.eps,
            exponential_avg_factor=BN_MOMENTUM if training else 1.0,
            data_format="NHWC",
            is_training=training,
        )
        if training:
            self.mean.assign(mean)
            self.var.assign(var)
        return y

    def _unfused(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        if training:
            mean, var = tf.nn.moments(x, axes=[0, 1, 2])
            count = tf.cast(tf.size(x) // tf.shape(x)[-1], var.dtype)
            self.mean.assign((1 - BN_MOMENTUM) * self.mean + BN_MOMENTUM * mean)
            unbiased = var * count / (count - 1)
            self.var.assign((1 - BN_MOMENTUM) * self.var + BN_MOMENTUM * unbiased)
        else:
            mean, var = self.mean, self.var
        return tf.nn.batch_normalization(x, mean, var, self.beta, self.gamma, self.eps)


class Dense:
    """nn.Linear. `flattened_from=(C, H, W)` marks a layer fed by an NHWC map flattened in
    (H, W, C) order, whose canonical rows PyTorch expects in (C, H, W) order."""

    def __init__(
        self,
        store: ParamStore,
        name: str,
        in_features: int,
        out_features: int,
        flattened_from: tuple[int, int, int] | None = None,
    ) -> None:
        to_c: Converter = _transpose
        from_c: Converter = _transpose
        if flattened_from is not None:
            to_c, from_c = _chw_row_converters(flattened_from, in_features)
        self.weight = store.new(
            f"{name}.weight",
            (in_features, out_features),
            _glorot(store),
            to_canonical=to_c,
            from_canonical=from_c,
        )
        self.bias = store.new(f"{name}.bias", (out_features,), "zeros")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        return tf.nn.bias_add(tf.matmul(x, self.weight), self.bias)


def _chw_row_converters(chw: tuple[int, int, int], in_features: int) -> tuple[Converter, Converter]:
    c, h, w = chw
    if c * h * w != in_features:
        raise ValueError(f"{chw} does not flatten to {in_features} features")

    def to_canonical(kernel: np.ndarray) -> np.ndarray:  # (H*W*C, out) -> (out, C*H*W)
        out = kernel.shape[1]
        return kernel.reshape(h, w, c, out).transpose(3, 2, 0, 1).reshape(out, c * h * w)

    def from_canonical(weight: np.ndarray) -> np.ndarray:  # (out, C*H*W) -> (H*W*C, out)
        out = weight.shape[0]
        return weight.reshape(out, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, out)

    return to_canonical, from_canonical


class Embedding:
    def __init__(self, store: ParamStore, name: str, vocab: int, dim: int) -> None:
        init = keras.initializers.RandomUniform(-0.05, 0.05, seed=store.next_seed())
        self.weight = store.new(f"{name}.weight", (vocab, dim), init)

    def __call__(self, ids: tf.Tensor) -> tf.Tensor:
        return tf.gather(self.weight, ids)


class _InFloat32(keras.initializers.Initializer):  # type: ignore[misc]  # Keras is untyped
    """Runs an initializer in float32 and casts: Orthogonal's QR has no bfloat16 kernel."""

    def __init__(self, inner: keras.initializers.Initializer) -> None:
        self.inner = inner

    def __call__(self, shape: tuple[int, ...], dtype: str | None = None) -> tf.Tensor:
        return tf.cast(self.inner(shape, dtype="float32"), dtype or "float32")


class LSTM:
    """One-layer LSTM returning the last hidden state: Keras' layer (one bias vector, gates
    i, f, c, o -- PyTorch's order), registered under PyTorch's names."""

    def __init__(self, store: ParamStore, name: str, input_size: int, hidden: int) -> None:
        self.layer = keras.layers.LSTM(
            hidden,
            kernel_initializer=_InFloat32(keras.initializers.GlorotUniform(seed=store.next_seed())),
            recurrent_initializer=_InFloat32(keras.initializers.Orthogonal(seed=store.next_seed())),
            dtype=store.dtype.name,
            name=name,
        )
        self.layer.build((None, None, input_size))
        cell = self.layer.cell
        for suffix, weight, convert in (
            ("weight_ih_l0", cell.kernel, _transpose),
            ("weight_hh_l0", cell.recurrent_kernel, _transpose),
            ("bias_l0", cell.bias, _same),
        ):
            variable = weight.value  # the tf.Variable behind the Keras variable
            if not isinstance(variable, tf.Variable):
                raise TypeError(f"Keras variable {weight.path} is not backed by a tf.Variable")
            store.add(f"{name}.{suffix}", Slot(variable, True, convert, convert))

    def __call__(self, x: tf.Tensor, training: bool) -> tf.Tensor:
        return self.layer(x, training=training)


# --------------------------------------------------------------------------------- functional


def max_pool_3x3_s2_p1(x: tf.Tensor) -> tf.Tensor:
    """nn.MaxPool2d(3, 2, padding=1). PyTorch pads with -inf; zero padding is equivalent here
    because the input comes out of a ReLU (>= 0) and every window holds a real element.
    'SAME' would pad asymmetrically for stride 2, hence the explicit pad."""
    padded = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]])
    return tf.nn.max_pool2d(padded, 3, 2, "VALID")


def max_pool_2x2(x: tf.Tensor) -> tf.Tensor:
    return tf.nn.max_pool2d(x, 2, 2, "VALID")


def global_avg_pool(x: tf.Tensor, keepdims: bool = False) -> tf.Tensor:
    return tf.reduce_mean(x, axis=[1, 2], keepdims=keepdims)


@functools.cache
def adaptive_pool_matrix(size_in: int, size_out: int) -> np.ndarray:
    """(size_out, size_in) averaging weights of nn.AdaptiveAvgPool along one axis: output bin i
    averages inputs floor(i * in / out) .. ceil((i + 1) * in / out) - 1."""
    matrix = np.zeros((size_out, size_in))
    for i in range(size_out):
        start = (i * size_in) // size_out
        end = -(-((i + 1) * size_in) // size_out)
        matrix[i, start:end] = 1.0 / (end - start)
    return matrix


def adaptive_avg_pool(x: tf.Tensor, size_out: int) -> tf.Tensor:
    """nn.AdaptiveAvgPool2d((size_out, size_out)) on NHWC, exact for every input size (the bins
    overlap when the size does not divide), as two constant pooling matrices."""
    rows = tf.constant(adaptive_pool_matrix(int(x.shape[1]), size_out), dtype=x.dtype)
    cols = tf.constant(adaptive_pool_matrix(int(x.shape[2]), size_out), dtype=x.dtype)
    return tf.einsum("ih,bhwc,jw->bijc", rows, x, cols)


def dropout(x: tf.Tensor, rate: float, training: bool) -> tf.Tensor:
    return tf.nn.dropout(x, rate) if training and rate > 0 else x
