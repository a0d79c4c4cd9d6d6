"""Single-operator workloads: gemm and conv2d. A training step of an op is its forward and
backward pass with gradients for every input (3x the forward FLOPs); there are no weights
to update, so no optimizer step."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch


def _randn(
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    train: bool,
) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device, generator=generator, requires_grad=train)


def _train_step(
    forward: Callable[[], torch.Tensor], leaves: tuple[torch.Tensor, ...], grad_output: torch.Tensor
) -> Callable[[], object]:
    def step() -> object:
        for leaf in leaves:
            leaf.grad = None
        out = forward()
        out.backward(grad_output)
        return out

    return step


Wrap = Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]


def _eager(fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    return fn


def build_gemm(
    batch: int,
    params: Mapping[str, int],
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    train: bool,
    wrap: Wrap = _eager,
) -> Callable[[], object]:
    m, n, k = params["m"], params["n"], params["k"]
    lead = (batch,) if batch > 1 else ()
    a = _randn((*lead, m, k), dtype, device, generator, train)
    b = _randn((*lead, k, n), dtype, device, generator, train)
    matmul = wrap(lambda x, y: torch.matmul(x, y))
    if not train:
        return lambda: matmul(a, b)
    grad = torch.ones((*lead, m, n), dtype=dtype, device=device)
    return _train_step(lambda: matmul(a, b), (a, b), grad)


def build_conv2d(
    batch: int,
    params: Mapping[str, int],
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    train: bool,
    wrap: Wrap = _eager,
) -> Callable[[], object]:
    k = params["kernel"]
    x = _randn(
        (batch, params["channels_in"], params["height"], params["width"]),
        dtype,
        device,
        generator,
        train,
    )
    w = _randn(
        (params["channels_out"], params["channels_in"], k, k), dtype, device, generator, train
    )

    conv = wrap(lambda x, w: torch.nn.functional.conv2d(x, w, padding=k // 2))

    def forward() -> torch.Tensor:
        return conv(x, w)

    if not train:
        return forward
    with torch.no_grad():
        grad = torch.ones_like(forward())
    return _train_step(forward, (x, w), grad)
