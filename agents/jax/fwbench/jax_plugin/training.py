"""Loss, optimizer and step functions shared by the benchmarks and the reference trainer."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar, cast

import jax
import jax.numpy as jnp
import optax
from jax import Array

from fwbench.jax_plugin.models import Model, Variables

# Only whole-step jit: JAX's op-by-op ("eager") dispatch mostly measures Python overhead,
# which is not how JAX is used for speed.
MODES: tuple[str, ...] = ("jit",)
# What a train step carries from one call to the next; donated to the next call under jit.
Carry = tuple[Variables, Variables, optax.OptState, Array]
F = TypeVar("F", bound=Callable[..., object])
TrainFn = Callable[..., tuple[Variables, Variables, optax.OptState, Array, Array]]


def example_losses(logits: Array, labels: Array) -> Array:
    """Each example's softmax cross-entropy, in float32 (also for bfloat16 logits)."""
    return optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)


def cross_entropy(logits: Array, labels: Array) -> Array:
    """Mean softmax cross-entropy, always computed in float32 (also for bfloat16 logits)."""
    return jnp.mean(example_losses(logits, labels))


def sgd(learning_rate: float = 0.01, momentum: float = 0.9) -> optax.GradientTransformation:
    """Classical momentum (v = momentum * v + g; w -= lr * v), which is PyTorch's SGD without
    dampening: optax starts v at zero, so its first v is g, as PyTorch's."""
    return optax.sgd(learning_rate, momentum=momentum)


def compile_fn(fn: F, mode: str, donate_argnums: Sequence[int] = ()) -> F:
    """ "jit": the whole function becomes one XLA program, compiled on its first call."""
    if mode != "jit":
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")
    return cast(F, jax.jit(fn, donate_argnums=tuple(donate_argnums)))


def make_infer_fn(model: Model) -> Callable[[Variables, Variables, Array], Array]:
    def infer(params: Variables, state: Variables, x: Array) -> Array:
        return model.apply(params, state, x, train=False)[0]

    return infer


def make_train_fn(
    model: Model,
    optimizer: optax.GradientTransformation,
    prepare: Callable[[Array], Array] | None = None,
    per_example: bool = False,
) -> TrainFn:
    """One SGD step: forward in training mode, loss, gradients of every trainable weight,
    update; BatchNorm running statistics and the dropout key move on as well. `prepare`
    converts the given inputs first (inside the step, so that jit fuses it). The step returns
    the mean loss, or with `per_example` each example's loss (the gradient is the mean's)."""

    def train(
        params: Variables,
        state: Variables,
        opt_state: optax.OptState,
        key: Array,
        x: Array,
        labels: Array,
    ) -> tuple[Variables, Variables, optax.OptState, Array, Array]:
        key, dropout_key = jax.random.split(key)
        if prepare is not None:
            x = prepare(x)

        def loss_fn(p: Variables) -> tuple[Array, tuple[Variables, Array]]:
            logits, new_state = model.apply(p, state, x, train=True, rng=dropout_key)
            losses = example_losses(logits, labels)
            return jnp.mean(losses), (new_state, losses)

        (loss, (new_state, losses)), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        returned = losses if per_example else loss
        return optax.apply_updates(params, updates), new_state, opt_state, key, returned

    return train


class TrainLoop:
    """Keeps params, BatchNorm state, optimizer state and dropout key between steps. Under
    jit their buffers are donated to each step, which updates them in place."""

    def __init__(
        self,
        model: Model,
        params: Variables,
        state: Variables,
        optimizer: optax.GradientTransformation,
        key: Array,
        mode: str,
        prepare: Callable[[Array], Array] | None = None,
        per_example: bool = False,
    ) -> None:
        train = make_train_fn(model, optimizer, prepare, per_example)
        self._step = compile_fn(train, mode, donate_argnums=(0, 1, 2, 3))
        self._carry: Carry = (params, state, optimizer.init(params), key)

    def __call__(self, x: Array, labels: Array) -> Array:
        params, state, opt_state, key, loss = self._step(*self._carry, x, labels)
        self._carry = (params, state, opt_state, key)
        return loss

    @property
    def params(self) -> Variables:
        return self._carry[0]

    @property
    def state(self) -> Variables:
        return self._carry[1]
