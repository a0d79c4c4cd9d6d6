"""Single-operator workloads: gemm and conv2d, as the PyTorch plugin's. A training step of an
op is its forward and backward pass with gradients for every input and an all-ones upstream
gradient (3x the forward FLOPs); there are no weights, so no optimizer step.

The step returns the output AND the gradients: in a tf.function, work whose result is never
used is pruned, and the gradients of a matmul or a convolution do not need the forward's
output, so a step that returned only the gradients lost its forward pass (measured on an AMD
EPYC, 2 vCPUs, 2026-11-24: a 1024^3 gemm training step took 19.8 ms returning the gradients,
39.0 ms returning the output too, 13.0 ms for inference; with FLOPs counted as 3x the forward
the row had claimed 325 GFLOP/s, twice the work done). JAX's step returns both too. The
upstream gradient is built once, outside the step, so that neither Grappler nor XLA sees a
constant it could fold the backward matmuls into."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import tensorflow as tf

from fwbench.tf_plugin.layers import conv_padding

Forward = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


def _inputs(
    shapes: tuple[tuple[int, ...], tuple[int, ...]], dtype: tf.DType, seed: int
) -> tuple[tf.Tensor, tf.Tensor]:
    rng = tf.random.Generator.from_seed(seed)
    return rng.normal(shapes[0], dtype=dtype), rng.normal(shapes[1], dtype=dtype)


def _step(
    forward: Forward, a: tf.Tensor, b: tf.Tensor, out_shape: tuple[int, ...], train: bool
) -> Callable[[], object]:
    if not train:
        return lambda: forward(a, b)
    upstream = tf.ones(out_shape, dtype=a.dtype)

    def train_step() -> object:
        with tf.GradientTape() as tape:
            tape.watch([a, b])
            out = forward(a, b)
        return out, tape.gradient(out, [a, b], output_gradients=upstream)

    return train_step


def build_gemm(
    batch: int, params: Mapping[str, int], dtype: tf.DType, seed: int, train: bool
) -> Callable[[], object]:
    """C = A @ B, batched (BatchMatMulV2) when batch > 1."""
    m, n, k = params["m"], params["n"], params["k"]
    lead = (batch,) if batch > 1 else ()
    a, b = _inputs(((*lead, m, k), (*lead, k, n)), dtype, seed)
    return _step(tf.matmul, a, b, (*lead, m, n), train)


def build_conv2d(
    batch: int, params: Mapping[str, int], dtype: tf.DType, seed: int, train: bool
) -> Callable[[], object]:
    """Stride 1, padding kernel // 2 on every side (even kernels grow the map by one, as in
    PyTorch), no bias; NHWC input, (kh, kw, in, out) filter."""
    k = params["kernel"]
    x_shape = (batch, params["height"], params["width"], params["channels_in"])
    w_shape = (k, k, params["channels_in"], params["channels_out"])
    x, w = _inputs((x_shape, w_shape), dtype, seed)
    padding = conv_padding(k, 1, k // 2)
    grow = 2 * (k // 2) - k + 1
    out_shape = (batch, params["height"] + grow, params["width"] + grow, params["channels_out"])

    def forward(inputs: tf.Tensor, filters: tf.Tensor) -> tf.Tensor:
        return tf.nn.conv2d(inputs, filters, 1, padding)

    return _step(forward, x, w, out_shape, train)
