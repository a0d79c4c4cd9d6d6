"""The "equivalence" capability (fwbench.runtime.reference): canonical weights exported from a
freshly initialised Keras model, and the equivalence steps run through the same Keras path as
the benchmark (compile in the backend's default mode, predict_on_batch, train_on_batch); for
gpt with new_tokens also the generate workload's greedy decoding (generation.py) in the
backend's default generation mode."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import keras
import numpy as np

from fwbench.keras_plugin import training, transformers, weights
from fwbench.keras_plugin.backend import Backend
from fwbench.keras_plugin.generation import build_generation
from fwbench.keras_plugin.models import Net, build_model
from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult


def model_inputs(model: str, inputs: np.ndarray, dtype: str = "float32") -> Any:
    """Canonical inputs (NCHW float32 images, int64 token ids) as the model takes them."""
    if model == "lstm":
        return keras.ops.convert_to_tensor(np.asarray(inputs, dtype=np.int32))
    nhwc = np.ascontiguousarray(np.asarray(inputs, dtype=np.float32).transpose(0, 2, 3, 1))
    return keras.ops.convert_to_tensor(nhwc, dtype=dtype)


def labels_tensor(labels: np.ndarray) -> Any:
    return keras.ops.convert_to_tensor(np.asarray(labels, dtype=np.int32))


def canonical_weights(
    model: str, seed: int, params: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """Keras' own initialisers, seeded by keras.utils.set_random_seed(seed); a transformer is
    shaped by `params` (the catalogue's defaults where missing)."""
    keras.utils.set_random_seed(seed)
    if model in TRANSFORMER_NAMES:
        return weights.export(
            transformers.build_transformer(transformers.config_for(model, params))
        )
    return weights.export(build_model(model))


def _build(case: EquivalenceCase) -> Net:
    """The case's model at its inputs' shape, without dropout."""
    shape = np.shape(case.inputs)
    if case.model == "lstm":
        return build_model(case.model, seq_len=int(shape[1]), with_dropout=False)
    size = int(shape[2]) if case.model != "lenet" else 224
    return build_model(case.model, image_size=size, with_dropout=False)


def equivalence(case: EquivalenceCase, backend: Backend) -> EquivalenceResult:
    """Float32, no dropout, Keras' default mode on the backend; the steps of EquivalenceCase."""
    if case.model in TRANSFORMER_NAMES:
        return transformer_equivalence(case, backend)
    net = _build(case)
    weights.load(net, case.weights)
    mode = training.modes(backend.name)[0]
    optimizer = case.optimizer
    training.compile_model(
        net.model, backend.name, mode, optimizer.learning_rate, optimizer.momentum
    )
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


def _generate(case: EquivalenceCase, model: Any, backend: Backend) -> tuple[np.ndarray, np.ndarray]:
    """Greedy decoding of case.new_tokens tokens from case.inputs: (tokens, top-two gaps)."""
    if not isinstance(model, transformers.GPT2LMHeadModel):
        raise ValueError(f"{case.model} does not generate: new_tokens is for gpt")
    batch, prompt_len = np.shape(case.inputs)
    params = {**case.params, "prompt_len": prompt_len, "new_tokens": case.new_tokens}
    mode = training.modes(backend.name)[0]
    steps, run = build_generation(params, batch, 0, backend, mode, model, case.inputs, True)
    steps.generate()
    tokens = np.stack(run.tokens, axis=1).astype(np.int64)
    return tokens, np.stack(run.gaps, axis=1).astype(np.float32)


def transformer_equivalence(case: EquivalenceCase, backend: Backend) -> EquivalenceResult:
    """EquivalenceCase's steps for bert or gpt (the language-model loss over the labelled
    positions), and for gpt with new_tokens the generation, on the loaded weights before the
    optimizer step."""
    net = transformers.build_transformer(transformers.config_for(case.model, case.params))
    weights.load(net, case.weights)
    loss = transformers.language_model_loss()
    optimizer = case.optimizer
    mode = training.modes(backend.name)[0]
    training.compile_model(
        net.model, backend.name, mode, optimizer.learning_rate, optimizer.momentum, loss
    )
    tokens = keras.ops.convert_to_tensor(np.asarray(case.inputs, dtype=np.int32))
    labels = labels_tensor(case.labels)
    eval_logits = np.asarray(net.model.predict_on_batch(tokens), dtype=np.float32)
    generated = gaps = None
    if case.new_tokens:
        generated, gaps = _generate(case, net.model, backend)
    loss_before = float(net.model.train_on_batch(tokens, labels))
    return EquivalenceResult(
        param_count=net.trainable_parameters(),
        eval_logits=eval_logits,
        loss_before=loss_before,
        loss_after=training.training_loss(net.model, tokens, labels, loss),
        generated=generated,
        generated_gaps=gaps,
    )
