"""Single-operator workloads, gemm and conv2d, with the PyTorch plugin's semantics.

A training step of an op is its forward pass and the backward pass to every input with an
all-ones upstream gradient (3x the forward FLOPs); there are no weights, so no optimizer. The
upstream gradient is made once, at build time. In static mode the forward op is a
``paddle.jit.to_static`` program and its backward the program's gradient."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import paddle
from paddle.nn import functional

from fwbench.paddle_plugin.training import compile_function


def _inputs(
    shapes: tuple[tuple[int, ...], ...], dtype: str, seed: int, train: bool
) -> list[paddle.Tensor]:
    rng = np.random.default_rng(seed)
    tensors = []
    for shape in shapes:
        tensor = paddle.to_tensor(rng.standard_normal(shape).astype(dtype))
        tensor.stop_gradient = not train
        tensors.append(tensor)
    return tensors


def _step(
    forward: Callable[..., paddle.Tensor], inputs: list[paddle.Tensor], train: bool, mode: str
) -> Callable[[], object]:
    compiled = compile_function(forward, mode)
    if not train:

        def infer() -> object:
            with paddle.no_grad():
                return compiled(*inputs)

        return infer
    with paddle.no_grad():
        grad = paddle.ones_like(forward(*inputs))

    def step() -> object:
        for tensor in inputs:
            tensor.clear_gradient(set_to_zero=False)
        out = compiled(*inputs)
        out.backward(grad)
        return out

    return step


def build_gemm(
    batch: int, params: Mapping[str, int], dtype: str, seed: int, train: bool, mode: str
) -> Callable[[], object]:
    """C = A @ B, batched over a leading axis when batch > 1 (as the PyTorch plugin)."""
    m, n, k = params["m"], params["n"], params["k"]
    lead = (batch,) if batch > 1 else ()
    inputs = _inputs(((*lead, m, k), (*lead, k, n)), dtype, seed, train)
    return _step(paddle.matmul, inputs, train, mode)


def build_conv2d(
    batch: int, params: Mapping[str, int], dtype: str, seed: int, train: bool, mode: str
) -> Callable[[], object]:
    """Stride-1, bias-free convolution of NCHW images with an (out, in, k, k) kernel, padded
    kernel//2 on every side (PyTorch's padding=k//2, even kernels too)."""
    k = params["kernel"]
    shapes = (
        (batch, params["channels_in"], params["height"], params["width"]),
        (params["channels_out"], params["channels_in"], k, k),
    )
    inputs = _inputs(shapes, dtype, seed, train)

    def conv(x: paddle.Tensor, w: paddle.Tensor) -> paddle.Tensor:
        return functional.conv2d(x, w, padding=k // 2)

    return _step(conv, inputs, train, mode)
