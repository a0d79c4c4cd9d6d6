"""The model steps in both modes: the training step (forward, mean softmax cross-entropy,
backward, SGD with classical momentum, gradients cleared) and the inference step (eval mode,
no gradients), plus the synthetic batch a cell runs on.

Modes:

- ``dygraph``: Paddle's eager (dynamic graph) execution, op by op;
- ``static``: ``paddle.jit.to_static`` (AST conversion, ``full_graph=True``) of the forward
  pass and loss, run as one PIR program by Paddle's executor, its backward pass the program's
  gradient program. The optimizer stays in dygraph: ``to_static`` converts a Layer's forward,
  not an optimizer's update of the parameters it owns, so the update runs as eager
  ``momentum`` kernels, one per parameter, as in the dygraph mode. The program is built on the
  first call (the first-iteration figure), never in the timed samples.

paddle.optimizer.Momentum is the canonical optimizer: ``velocity = mu * velocity + grad;
param -= lr * velocity`` (no dampening), with use_nesterov=False and no weight decay."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import paddle
from paddle import nn
from paddle.nn import functional

from fwbench.paddle_plugin.models import frozen_parameters, trainable_parameters
from fwbench.runtime import architectures as arch

T = TypeVar("T")
MODES = ("dygraph", "static")
LEARNING_RATE, MOMENTUM = 0.01, 0.9
# What each mode runs (Settings.extra["execution"]).
EXECUTION = {
    "dygraph": "dynamic graph, op by op",
    "static": "paddle.jit.to_static (full_graph) forward and loss as one program, its gradient "
    "program for the backward pass; optimizer update eager",
    # The attention op's written-out products (attention.py).
    "plain": "dynamic graph, op by op",
}
OPTIMIZER = "paddle.optimizer.Momentum(momentum=0.9, use_nesterov=False), no weight decay"


# Building a program's backward, Paddle 3.3 warns from its own code (pir_partial_program's
# full_like of a PIR value) that the value has no place: noise, silenced while it builds.
_BUILD_WARNING = "Tensor do not have 'place' interface for pir graph mode"


def _quiet_first_call(function: Callable[..., T]) -> Callable[..., T]:
    """`function`, its first call (where to_static builds the programs) under a filter for
    Paddle's own _BUILD_WARNING; later calls go straight through (they are timed)."""
    built = False

    def call(*args: paddle.Tensor) -> T:
        nonlocal built
        if built:
            return function(*args)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_BUILD_WARNING, category=UserWarning)
            result = function(*args)
        built = True
        return result

    return call


def compile_layer(layer: nn.Layer, mode: str) -> Callable[..., paddle.Tensor]:
    """`layer` itself in dygraph mode; converted to a static program in static mode."""
    if mode == "static":
        return _quiet_first_call(paddle.jit.to_static(layer, full_graph=True))
    return layer


def compile_function(function: Callable[..., T], mode: str) -> Callable[..., T]:
    if mode == "static":
        return _quiet_first_call(paddle.jit.to_static(function, full_graph=True))
    return function


class WithLoss(nn.Layer):
    """The model's logits and the mean softmax cross-entropy on them, as one Layer (what
    static mode converts)."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        return functional.cross_entropy(self.model(inputs), labels)


def momentum(
    model: nn.Layer, learning_rate: float = LEARNING_RATE, mu: float = MOMENTUM
) -> paddle.optimizer.Momentum:
    return paddle.optimizer.Momentum(
        learning_rate=learning_rate,
        momentum=mu,
        parameters=trainable_parameters(model),
        use_nesterov=False,
        weight_decay=None,
    )


class TrainStep:
    """One optimizer step of `model` on a batch; returns the loss (before the update).
    `with_loss` wraps the model in the Layer that computes the loss (WithLoss, or the
    transformers' language-model loss, language_model.py)."""

    def __init__(
        self,
        model: nn.Layer,
        mode: str,
        learning_rate: float = LEARNING_RATE,
        mu: float = MOMENTUM,
        with_loss: Callable[[nn.Layer], nn.Layer] = WithLoss,
    ) -> None:
        self.model = model.train()
        self.loss = compile_layer(with_loss(model), mode)
        self.optimizer = momentum(model, learning_rate, mu)
        self.frozen = frozen_parameters(model)

    def __call__(self, inputs: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        loss = self.loss(inputs, labels)
        loss.backward()
        self.optimizer.step()
        self.optimizer.clear_grad(set_to_zero=False)  # as PyTorch's zero_grad(set_to_none)
        for tensor in self.frozen:  # gradients Paddle's kernels write but nothing applies
            tensor.clear_gradient(set_to_zero=False)
        return loss


class InferStep:
    """The forward pass in eval mode (BatchNorm on running statistics, no dropout), without
    autograd's bookkeeping."""

    def __init__(self, model: nn.Layer, mode: str) -> None:
        self.model = model.eval()
        self.forward = compile_layer(model, mode)

    def __call__(self, inputs: paddle.Tensor) -> paddle.Tensor:
        with paddle.no_grad():
            return self.forward(inputs)


@dataclass(frozen=True)
class Batch:
    inputs: paddle.Tensor
    labels: paddle.Tensor


def synthetic_batch(
    name: str, batch_size: int, image_size: int, seq_len: int, dtype: str, seed: int
) -> Batch:
    """Inputs as PyTorch's example_batch shapes them (lenet 1x28x28, images 3xSxS, token ids
    (batch, seq_len) int64) and int64 labels, drawn from `seed` on the host."""
    rng = np.random.default_rng(seed)
    if name == "lstm":
        inputs = rng.integers(0, arch.LSTM_VOCAB_SIZE, (batch_size, seq_len), dtype=np.int64)
    else:
        if name == "lenet":
            shape = (batch_size, 1, arch.LENET_IMAGE_SIZE, arch.LENET_IMAGE_SIZE)
        elif image_size < arch.MIN_IMAGE_SIZE:
            raise ValueError(f"image_size must be >= {arch.MIN_IMAGE_SIZE} for {name}")
        else:
            shape = (batch_size, 3, image_size, image_size)
        inputs = rng.standard_normal(shape).astype(dtype)
    labels = rng.integers(0, arch.NUM_CLASSES[name], (batch_size,), dtype=np.int64)
    return Batch(paddle.to_tensor(inputs), paddle.to_tensor(labels))
