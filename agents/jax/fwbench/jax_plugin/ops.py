"""Single-operator workloads: gemm and conv2d, with the torch plugin's semantics.

A training step of an op is its forward pass plus the backward pass to every input with an
all-ones upstream gradient (3x the forward FLOPs); there are no weights, hence no optimizer.
The upstream gradient is an argument created at build time, never a traced constant: XLA
could otherwise simplify a product with a known all-ones matrix into a reduction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
from jax import Array, lax

from fwbench.jax_plugin.training import compile_fn


def _with_input_grads(forward: Callable[..., Array]) -> Callable[..., object]:
    """forward(*inputs) -> (output, gradients of every input) for an upstream `grad`."""

    def step(*args: Array) -> object:
        *inputs, grad = args
        out, vjp = jax.vjp(forward, *inputs)
        return out, vjp(grad)

    return step


def bind_step(
    forward: Callable[..., Array], inputs: tuple[Array, ...], train: bool, mode: str = "jit"
) -> Callable[[], object]:
    """The step as a partial over its device inputs, which exist when this returns: random
    generation is asynchronous, and neither its time nor its out-of-memory error belongs to
    the first timed step."""
    if train:
        out_shape = jax.eval_shape(forward, *inputs)
        inputs = (*inputs, jnp.ones(out_shape.shape, out_shape.dtype))
        forward = _with_input_grads(forward)
    jax.block_until_ready(inputs)
    return functools.partial(compile_fn(forward, mode), *inputs)


def build_gemm(
    batch: int, params: Mapping[str, int], dtype: jnp.dtype, key: Array, train: bool, mode: str
) -> Callable[[], object]:
    """C = A @ B, batched over a leading axis when batch > 1 (as the torch plugin)."""
    m, n, k = params["m"], params["n"], params["k"]
    lead = (batch,) if batch > 1 else ()
    key_a, key_b = jax.random.split(key)
    a = jax.random.normal(key_a, (*lead, m, k), dtype)
    b = jax.random.normal(key_b, (*lead, k, n), dtype)
    return bind_step(jnp.matmul, (a, b), train, mode)


def _conv(x: Array, w: Array) -> Array:
    padding = w.shape[0] // 2  # PyTorch's padding=kernel//2 on both sides, even kernels too
    return lax.conv_general_dilated(
        x,
        w,
        window_strides=(1, 1),
        padding=((padding, padding), (padding, padding)),
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
    )


def build_conv2d(
    batch: int, params: Mapping[str, int], dtype: jnp.dtype, key: Array, train: bool, mode: str
) -> Callable[[], object]:
    """Stride-1, bias-free 2-D convolution on NHWC images with an HWIO kernel."""
    k = params["kernel"]
    key_x, key_w = jax.random.split(key)
    x = jax.random.normal(
        key_x, (batch, params["height"], params["width"], params["channels_in"]), dtype
    )
    w = jax.random.normal(key_w, (k, k, params["channels_in"], params["channels_out"]), dtype)
    return bind_step(_conv, (x, w), train, mode)
