"""Execution modes, the loss, the optimizer and the compiled model programs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

from fwbench.tf_plugin.models import Model

# modes[0] is the default: graph execution through tf.function, the way TensorFlow models
# are normally run; "xla" adds jit_compile; "eager" runs op by op.
MODES: tuple[str, ...] = ("function", "xla", "eager")
LEARNING_RATE = 0.01
MOMENTUM = 0.9
Loss = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]  # (logits, labels) -> scalar loss


def compile_fn(fn: Callable[..., Any], mode: str) -> Callable[..., Any]:
    """`fn` as `mode` runs it. AutoGraph is off: the steps have no tensor-dependent Python
    control flow, and converting Keras' LSTM code only adds tracing time and log noise."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
    if mode == "eager":
        return fn
    compiled: Callable[..., Any] = tf.function(fn, jit_compile=mode == "xla", autograph=False)
    return compiled


def cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Mean sparse softmax cross-entropy on logits. Half-precision logits are upcast first,
    as Keras' mixed precision does: the softmax is a negligible cost."""
    if logits.dtype in (tf.bfloat16, tf.float16):
        logits = tf.cast(logits, tf.float32)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return tf.reduce_mean(losses)


class MomentumSGD:
    """SGD with classical momentum, ``v = momentum * v + grad; w -= lr * v`` -- exactly what
    TensorFlow's fused ResourceApplyMomentum kernel computes, one op per variable."""

    def __init__(self, variables: Sequence[tf.Variable], learning_rate: float, momentum: float):
        self.variables = list(variables)
        self.learning_rate = learning_rate
        self.momentum = momentum
        self.velocities = []
        for variable in self.variables:
            with tf.device(variable.device):
                self.velocities.append(tf.Variable(tf.zeros_like(variable), trainable=False))

    def apply(self, gradients: Sequence[tf.Tensor | tf.IndexedSlices | None]) -> None:
        for variable, velocity, gradient in zip(
            self.variables, self.velocities, gradients, strict=True
        ):
            if gradient is None:
                raise ValueError(f"no gradient reaches {variable.name}")
            if isinstance(gradient, tf.IndexedSlices):
                # Embedding gradients arrive sparse. PyTorch's (non-sparse) embedding gets a
                # dense one, so momentum decays every row: densify rather than sparse-apply.
                gradient = tf.convert_to_tensor(gradient)
            tf.raw_ops.ResourceApplyMomentum(
                var=variable.handle,
                accum=velocity.handle,
                lr=tf.cast(self.learning_rate, variable.dtype),
                grad=gradient,
                momentum=tf.cast(self.momentum, variable.dtype),
                use_locking=False,
                use_nesterov=False,
            )


class ModelProgram:
    """A model with its inference, training-loss and training-step functions compiled for one
    mode; each tf.function traces once per input shape. Without an optimizer (inference
    workloads) no momentum buffers are allocated and `train_step` is unavailable. `loss` is
    the classifiers' cross_entropy unless given (the transformers' skips ignored labels)."""

    def __init__(
        self,
        model: Model,
        mode: str,
        optimizer: MomentumSGD | None = None,
        loss: Loss = cross_entropy,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.loss = loss
        self.logits = compile_fn(self._logits, mode)
        self.train_loss = compile_fn(self._train_loss, mode)
        self.train_step = compile_fn(self._train_step, mode)

    @classmethod
    def for_training(
        cls,
        model: Model,
        mode: str,
        learning_rate: float = LEARNING_RATE,
        momentum: float = MOMENTUM,
        loss: Loss = cross_entropy,
    ) -> ModelProgram:
        variables = model.store.trainable_variables()
        return cls(model, mode, MomentumSGD(variables, learning_rate, momentum), loss)

    def _logits(self, inputs: tf.Tensor) -> tf.Tensor:
        return self.model(inputs, training=False)

    def _train_loss(self, inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        return self.loss(self.model(inputs, training=True), labels)

    def _train_step(self, inputs: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
        """One SGD step; returns the loss before the update."""
        if self.optimizer is None:
            raise RuntimeError("this program was built without an optimizer")
        with tf.GradientTape() as tape:
            loss = self._train_loss(inputs, labels)
        gradients = tape.gradient(loss, self.optimizer.variables)
        self.optimizer.apply(gradients)
        return loss
