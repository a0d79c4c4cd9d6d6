"""The "equivalence" capability (fwbench.runtime.reference): canonical weights exported from a
freshly initialised Keras model, and the equivalence steps run through the same Keras path as
the benchmark (compile in the backend's default mode, predict_on_batch, train_on_batch)."""

from __future__ import annotations

from typing import Any

import keras
import numpy as np

from fwbench.keras_plugin import training, weights
from fwbench.keras_plugin.models import Net, build_model
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult


def model_inputs(model: str, inputs: np.ndarray, dtype: str = "float32") -> Any:
    """Canonical inputs (NCHW float32 images, int64 token ids) as the model takes them."""
    if model == "lstm":
        return keras.ops.convert_to_tensor(np.asarray(inputs, dtype=np.int32))
    nhwc = np.ascontiguousarray(np.asarray(inputs, dtype=np.float32).transpose(0, 2, 3, 1))
    return keras.ops.convert_to_tensor(nhwc, dtype=dtype)


def labels_tensor(labels: np.ndarray) -> Any:
    return keras.ops.convert_to_tensor(np.asarray(labels, dtype=np.int32))


def canonical_weights(model: str, seed: int) -> dict[str, np.ndarray]:
    """Keras' own initialisers, seeded by keras.utils.set_random_seed(seed)."""
    keras.utils.set_random_seed(seed)
    return weights.export(build_model(model))


def _build(case: EquivalenceCase) -> Net:
    """The case's model at its inputs' shape, without dropout."""
    shape = np.shape(case.inputs)
    if case.model == "lstm":
        return build_model(case.model, seq_len=int(shape[1]), with_dropout=False)
    size = int(shape[2]) if case.model != "lenet" else 224
    return build_model(case.model, image_size=size, with_dropout=False)


def equivalence(case: EquivalenceCase, backend: str) -> EquivalenceResult:
    """Float32, no dropout, Keras' default mode on the backend; the steps of EquivalenceCase."""
    net = _build(case)
    weights.load(net, case.weights)
    mode = training.modes(backend)[0]
    optimizer = case.optimizer
    training.compile_model(net.model, backend, mode, optimizer.learning_rate, optimizer.momentum)
    inputs, labels = model_inputs(case.model, case.inputs), labels_tensor(case.labels)
    # Inference first, before a training-mode pass touches BatchNorm's moving statistics.
    eval_logits = np.asarray(net.model.predict_on_batch(inputs), dtype=np.float32)
    loss_before = float(net.model.train_on_batch(inputs, labels))
    loss_after = training.training_loss(net.model, inputs, labels)
    return EquivalenceResult(
        param_count=net.trainable_parameters(),
        eval_logits=eval_logits,
        loss_before=loss_before,
        loss_after=loss_after,
    )
