"""Training and inference the way Keras users write them: `model.compile(optimizer=SGD(0.01,
momentum=0.9), loss=SparseCategoricalCrossentropy(from_logits=True), jit_compile=...,
run_eagerly=...)`, then `train_on_batch(x, y)` per training step and `predict_on_batch(x)` per
inference step (Keras' compiled predict function: the model called with training=False).

Modes, per backend, name what Keras compiles the step into, aligned with the native plugins'
names; modes[0] is what Keras itself resolves by default (jit_compile="auto",
run_eagerly=False) on that backend:

- torch: "eager" (Keras' default: no torch.compile), "compile" (jit_compile=True: Keras
  wraps its train and predict functions in torch.compile);
- jax: "jit" (the default: jax.jit of the whole stateless step), "eager" (run_eagerly=True);
- tensorflow: "function" (tf.function; Keras' default on a CPU-only host, where "auto"
  disables XLA) or "xla" (jit_compile=True; the default where TensorFlow sees a GPU), and
  "eager" (run_eagerly=True).

Keras' SGD with momentum updates m = momentum * m - lr * g, w += m: with a constant learning
rate that is PyTorch's classical momentum (v = momentum * v + g, w -= lr * v) with m = -lr * v.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import keras

from fwbench.runtime.plugin import UnsupportedWorkload

LEARNING_RATE, MOMENTUM = 0.01, 0.9
TRAIN_API, INFER_API = "train_on_batch", "predict_on_batch"


@dataclass(frozen=True)
class Mode:
    jit_compile: bool  # what Keras resolves it to (checked after compile)
    run_eagerly: bool


_MODES: Mapping[str, Mapping[str, Mode]] = {
    "torch": {"eager": Mode(False, False), "compile": Mode(True, False)},
    "jax": {"jit": Mode(True, False), "eager": Mode(False, True)},
    "tensorflow": {
        "function": Mode(False, False),
        "xla": Mode(True, False),
        "eager": Mode(False, True),
    },
}


def tensorflow_default_mode() -> str:
    """What Keras' jit_compile="auto" gives on TensorFlow: no XLA on a host whose TensorFlow
    sees only CPUs (Trainer._resolve_auto_jit_compile), XLA otherwise (every layer here
    supports it)."""
    import tensorflow as tf

    others = [d for d in tf.config.list_physical_devices() if d.device_type != "CPU"]
    return "xla" if others else "function"


def modes(backend: str) -> tuple[str, ...]:
    """The backend's modes, Keras' default first."""
    names = tuple(_MODES[backend])
    if backend != "tensorflow":
        return names
    default = tensorflow_default_mode()
    return (default, *(name for name in names if name != default))


def compile_model(
    model: keras.Model,
    backend: str,
    mode: str,
    learning_rate: float = LEARNING_RATE,
    momentum: float = MOMENTUM,
    loss: keras.losses.Loss | None = None,
) -> dict[str, str]:
    """Compiles `model` for `mode` (Keras' own "auto" for the backend's default mode) with
    `loss` (default: classification_loss()); raises RuntimeError when Keras resolved the mode
    otherwise. Returns the settings to record."""
    wanted = _MODES[backend][mode]
    default = mode == modes(backend)[0]
    model.compile(
        optimizer=keras.optimizers.SGD(learning_rate=learning_rate, momentum=momentum),
        loss=loss or classification_loss(),
        jit_compile="auto" if default else wanted.jit_compile,
        run_eagerly=wanted.run_eagerly,
    )
    return _resolved(model, mode, wanted, "auto" if default else str(wanted.jit_compile).lower())


def set_mode(model: keras.Model, backend: str, mode: str) -> dict[str, str]:
    """Sets `mode` on a model as it came from a user's file, compiled or not: jit_compile and
    run_eagerly as compile() sets them, its loss, optimizer and metrics left as they are, and
    its compiled functions dropped (made again at the next step, in the mode). Raises
    UnsupportedWorkload when Keras would run the model otherwise (a layer XLA cannot
    compile). Returns the settings to record."""
    wanted = _MODES[backend][mode]
    with warnings.catch_warnings(record=True):  # "Model doesn't support jit_compile=True"
        warnings.simplefilter("always")
        model.run_eagerly = wanted.run_eagerly
        model.jit_compile = wanted.jit_compile
    model.train_function = model.test_function = model.predict_function = None
    try:
        return _resolved(model, mode, wanted, str(wanted.jit_compile).lower())
    except RuntimeError as error:
        raise UnsupportedWorkload(f"{error}: this model does not run in mode {mode!r}") from None


def _resolved(model: keras.Model, mode: str, wanted: Mode, requested: str) -> dict[str, str]:
    resolved = bool(model.jit_compile)
    if resolved != wanted.jit_compile or bool(model.run_eagerly) != wanted.run_eagerly:
        raise RuntimeError(
            f"Keras compiled mode {mode!r} as jit_compile={resolved}, "
            f"run_eagerly={model.run_eagerly}"
        )
    return {
        "jit_compile": str(resolved).lower(),
        "jit_compile_requested": requested,
        "run_eagerly": str(bool(model.run_eagerly)).lower(),
    }


def train_step(model: keras.Model, inputs: Any, labels: Any) -> Callable[[], object]:
    """One optimizer step on the same batch; returns the batch's loss (a host float)."""
    return lambda: model.train_on_batch(inputs, labels)


def infer_step(model: keras.Model, inputs: Any) -> Callable[[], object]:
    """One forward pass in inference mode; returns the logits (host numpy, as Keras does)."""
    return lambda: model.predict_on_batch(inputs)


def classification_loss() -> keras.losses.Loss:
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def training_loss(
    model: keras.Model, inputs: Any, labels: Any, loss: keras.losses.Loss | None = None
) -> float:
    """The training-mode loss (BatchNorm on the batch's statistics) without an update;
    `loss` as compile_model's."""
    loss = loss or classification_loss()
    logits = model(inputs, training=True)
    return float(keras.ops.convert_to_numpy(loss(labels, logits)))
