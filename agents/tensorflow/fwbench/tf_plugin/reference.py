"""The ReferencePlugin half (fwbench.runtime.reference): canonical weights, the equivalence
steps (the transformers' too), and a trainer fed host batches."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.plugin import Settings
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec, Weights
from fwbench.tf_plugin import transformers
from fwbench.tf_plugin.generation import build_generation
from fwbench.tf_plugin.models import build_model
from fwbench.tf_plugin.training import MODES, ModelProgram
from fwbench.tf_plugin.transformer_layers import language_model_loss


def model_inputs(model: str, inputs: np.ndarray, dtype: tf.DType, device: str) -> tf.Tensor:
    """Canonical inputs (NCHW float32 images, int64 token ids) as the model takes them."""
    with tf.device(device):
        if model == "lstm":
            return tf.constant(inputs, dtype=tf.int64)
        nhwc = np.ascontiguousarray(np.asarray(inputs, dtype=np.float32).transpose(0, 2, 3, 1))
        return tf.cast(tf.constant(nhwc), dtype)


def labels_tensor(labels: np.ndarray, device: str) -> tf.Tensor:
    with tf.device(device):
        return tf.constant(labels, dtype=tf.int64)


def canonical_weights(
    model: str, seed: int, device: str, params: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """A transformer is shaped by `params` (the catalogue's defaults where missing)."""
    if model in TRANSFORMER_NAMES:
        config = transformers.config_for(model, params)
        return transformers.build_transformer(config, seed=seed, device=device).store.export()
    return build_model(model, seed=seed, device=device).store.export()


def equivalence(case: EquivalenceCase, device: str) -> EquivalenceResult:
    """Float32, no dropout, the default mode; the steps of EquivalenceCase's docstring."""
    if case.model in TRANSFORMER_NAMES:
        return transformer_equivalence(case, device)
    net = build_model(case.model, device=device, with_dropout=False)
    net.store.load(case.weights)
    program = ModelProgram.for_training(
        net, MODES[0], case.optimizer.learning_rate, case.optimizer.momentum
    )
    inputs = model_inputs(case.model, case.inputs, tf.float32, device)
    labels = labels_tensor(case.labels, device)
    eval_logits = program.logits(inputs).numpy()  # before training mode touches BN statistics
    loss_before = float(program.train_step(inputs, labels))
    loss_after = float(program.train_loss(inputs, labels))
    return EquivalenceResult(
        param_count=net.store.param_count(),
        eval_logits=np.asarray(eval_logits, dtype=np.float32),
        loss_before=loss_before,
        loss_after=loss_after,
    )


def transformer_equivalence(case: EquivalenceCase, device: str) -> EquivalenceResult:
    """EquivalenceCase's steps for bert or gpt (the language-model loss over the labelled
    positions), and for gpt with new_tokens the generate workload's greedy decoding in the
    default mode (its benchmark path: prefill, then static-shape decode steps on the KV
    cache), on the loaded weights before the optimizer step."""
    config = transformers.config_for(case.model, case.params)
    net = transformers.build_transformer(config, device=device)
    net.store.load(case.weights)
    program = ModelProgram.for_training(
        net, MODES[0], case.optimizer.learning_rate, case.optimizer.momentum, language_model_loss
    )
    with tf.device(device):
        tokens = tf.constant(case.inputs, dtype=tf.int64)
        labels = labels_tensor(case.labels, device)
    eval_logits = program.logits(tokens).numpy()
    generated = gaps = None
    if case.new_tokens:
        if not isinstance(net, transformers.GPT2LMHeadModel):
            raise ValueError(f"{case.model} does not generate: new_tokens is for gpt")
        batch, prompt_len = np.shape(case.inputs)
        params = {**case.params, "prompt_len": prompt_len, "new_tokens": case.new_tokens}
        steps, run = build_generation(
            params, batch, tf.float32, 0, device, MODES[0], net, case.inputs, keep_gaps=True
        )
        steps.generate()
        generated = np.stack([t.numpy() for t in run.tokens], axis=1).astype(np.int64)
        gaps = np.stack([g.numpy() for g in run.gaps], axis=1).astype(np.float32)
    loss_before = float(program.train_step(tokens, labels))
    loss_after = float(program.train_loss(tokens, labels))
    return EquivalenceResult(
        param_count=net.store.param_count(),
        eval_logits=np.asarray(eval_logits, dtype=np.float32),
        loss_before=loss_before,
        loss_after=loss_after,
        generated=generated,
        generated_gaps=gaps,
    )


class ProgramTrainer:
    """`Trainer` over a compiled ModelProgram: host batches are converted, then stepped."""

    def __init__(
        self, model: str, program: ModelProgram, dtype: tf.DType, device: str, settings: Settings
    ) -> None:
        self.model = model
        self.program = program
        self.dtype = dtype
        self.device = device
        self.settings = settings

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> object:
        inputs = model_inputs(self.model, images, self.dtype, self.device)
        return self.program.train_step(inputs, labels_tensor(labels, self.device))

    def predict(self, images: np.ndarray) -> np.ndarray:
        logits = self.program.logits(model_inputs(self.model, images, self.dtype, self.device))
        return np.asarray(tf.argmax(logits, axis=1, output_type=tf.int64))


def trainer(
    model: str,
    weights: Weights,
    optimizer: OptimizerSpec,
    dtype: tf.DType,
    mode: str,
    device: str,
    settings: Settings,
) -> ProgramTrainer:
    net = build_model(model, dtype=dtype, device=device)
    net.store.load(weights)
    program = ModelProgram.for_training(net, mode, optimizer.learning_rate, optimizer.momentum)
    return ProgramTrainer(model, program, dtype, device, settings)
