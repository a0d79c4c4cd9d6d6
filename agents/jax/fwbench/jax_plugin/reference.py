"""The ReferencePlugin half: canonical weights, the equivalence check and a host-fed trainer.

Canonical inputs are NCHW images (or token ids) and int64 labels; the models compute in NHWC
with int32 labels (JAX's default without x64), so conversions happen here, at the boundary.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array
from jax.typing import DTypeLike

from fwbench.jax_plugin.models import Model, Variables
from fwbench.jax_plugin.training import TrainLoop, compile_fn, cross_entropy, make_infer_fn
from fwbench.runtime.plugin import Settings
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec, Weights


def canonical_weights(name: str, seed: int) -> dict[str, np.ndarray]:
    model = Model(name)
    params, state = model.init(jax.random.PRNGKey(seed))
    return model.to_canonical(params, state)


def to_model_input(model: Model, inputs: np.ndarray | Array, *, dtype: DTypeLike) -> Array:
    """Canonical inputs -> what the model takes: NCHW images become NHWC in `dtype`; token ids
    become int32 (every id is below the vocabulary size, so nothing is lost)."""
    if model.name == "lstm":
        return jnp.asarray(inputs, jnp.int32)
    return jnp.transpose(jnp.asarray(inputs, dtype), (0, 2, 3, 1))


def _labels(labels: np.ndarray) -> Array:
    return jnp.asarray(np.asarray(labels).astype(np.int32))


def optimizer_for(spec: OptimizerSpec) -> optax.GradientTransformation:
    return optax.sgd(spec.learning_rate, momentum=spec.momentum)


def equivalence_fn(
    model: Model, optimizer: optax.GradientTransformation
) -> Callable[[Variables, Variables, Array, Array], tuple[Array, Array, Array]]:
    """EquivalenceCase steps 1-4 as one function; no dropout key, so dropout is off."""

    def loss_fn(params: Variables, state: Variables, x: Array, labels: Array) -> Array:
        logits, _ = model.apply(params, state, x, train=True)  # batch statistics
        return cross_entropy(logits, labels)

    def run(
        params: Variables, state: Variables, x: Array, labels: Array
    ) -> tuple[Array, Array, Array]:
        eval_logits, _ = model.apply(params, state, x, train=False)
        loss_before, grads = jax.value_and_grad(loss_fn)(params, state, x, labels)
        updates, _ = optimizer.update(grads, optimizer.init(params), params)
        loss_after = loss_fn(optax.apply_updates(params, updates), state, x, labels)
        return eval_logits, loss_before, loss_after

    return run


def equivalence(case: EquivalenceCase) -> EquivalenceResult:
    model = Model(case.model)
    params, state = model.from_canonical(case.weights)
    run = jax.jit(equivalence_fn(model, optimizer_for(case.optimizer)))
    x = to_model_input(model, case.inputs, dtype=jnp.float32)
    eval_logits, loss_before, loss_after = run(params, state, x, _labels(case.labels))
    return EquivalenceResult(
        param_count=model.trainable_count(),
        eval_logits=np.asarray(eval_logits, np.float32),
        loss_before=float(loss_before),
        loss_after=float(loss_after),
    )


class JaxTrainer:
    """Trains on host batches. The NCHW -> NHWC conversion runs inside the jitted steps, and
    each step compiles once: every batch has the same shape."""

    def __init__(
        self,
        name: str,
        weights: Weights,
        optimizer: OptimizerSpec,
        *,
        dtype: jnp.dtype,
        mode: str,
        seed: int,
        settings: Settings,
    ) -> None:
        self.settings = settings
        self._model = Model(name)
        params, state = self._model.from_canonical(weights, dtype)
        prepare = functools.partial(to_model_input, self._model, dtype=dtype)
        key = jax.random.PRNGKey(seed)  # dropout, for models that have it
        self._loop = TrainLoop(
            self._model, params, state, optimizer_for(optimizer), key, mode, prepare
        )
        infer = make_infer_fn(self._model)

        def predict(params: Variables, state: Variables, images: Array) -> Array:
            return jnp.argmax(infer(params, state, prepare(images)), axis=-1)

        self._predict = compile_fn(predict, mode)

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> object:
        return self._loop(jnp.asarray(images), _labels(labels))

    def predict(self, images: np.ndarray) -> np.ndarray:
        classes = self._predict(self._loop.params, self._loop.state, jnp.asarray(images))
        return np.asarray(classes).astype(np.int64)
