"""Single-operator workloads, gemm and conv2d, in keras.ops (backend-neutral), as the native
plugins define them: a training step of an op is its forward and backward pass with
gradients for every input from an all-ones upstream gradient (3x the forward FLOPs), no
optimizer. Keras has no backend-neutral gradient, so backend.py takes the gradient and
compiles the function the backend's way for the mode (torch.compile, jax.jit, tf.function)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import keras

from fwbench.keras_plugin.backend import Backend


def _inputs(shapes: tuple[tuple[int, ...], ...], dtype: str, seed: int) -> list[Any]:
    generator = keras.random.SeedGenerator(seed)
    return [keras.random.normal(shape, dtype=dtype, seed=generator) for shape in shapes]


def build_gemm(
    batch: int,
    params: Mapping[str, int],
    dtype: str,
    seed: int,
    train: bool,
    mode: str,
    backend: Backend,
) -> Callable[[], object]:
    """C = A @ B (keras.ops.matmul), batched when batch > 1."""
    m, n, k = params["m"], params["n"], params["k"]
    lead = (batch,) if batch > 1 else ()
    a, b = _inputs(((*lead, m, k), (*lead, k, n)), dtype, seed)
    return backend.op_step(keras.ops.matmul, (a, b), train, mode)


def build_conv2d(
    batch: int,
    params: Mapping[str, int],
    dtype: str,
    seed: int,
    train: bool,
    mode: str,
    backend: Backend,
) -> Callable[[], object]:
    """keras.ops.conv, stride 1, padding kernel // 2 on every side as PyTorch's (an even
    kernel grows the map by one: padded explicitly, "same" would not), no bias; NHWC input,
    (kh, kw, in, out) kernel."""
    k = params["kernel"]
    x_shape = (batch, params["height"], params["width"], params["channels_in"])
    w_shape = (k, k, params["channels_in"], params["channels_out"])
    x, w = _inputs((x_shape, w_shape), dtype, seed)
    pad = k // 2

    def conv(inputs: Any, kernel: Any) -> Any:
        if k % 2:  # "same" pads an odd kernel symmetrically
            return keras.ops.conv(inputs, kernel, strides=1, padding="same")
        padded = keras.ops.pad(inputs, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        return keras.ops.conv(padded, kernel, strides=1, padding="valid")

    return backend.op_step(conv, (x, w), train, mode)
