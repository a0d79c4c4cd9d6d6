"""The optional capabilities: canonical weights, the equivalence check (capability
"equivalence") and a trainer fed host batches by the runtime (capability "accuracy").

Canonical inputs are NCHW images, which is what the Paddle models compute on, and int64
labels and token ids, which Paddle takes as they are: nothing is converted but the weights
(weights.py). The transformers (transformers.py) take the same steps on their language-model
loss, and GPT-2 also generates greedily on its KV cache (generation.py)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle
from paddle import nn
from paddle.nn import functional

from fwbench.paddle_plugin import language_model, models, transformers, weights
from fwbench.paddle_plugin.generation import build_generation
from fwbench.paddle_plugin.training import TrainStep, compile_layer
from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.plugin import Settings
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, OptimizerSpec, Weights


def canonical_weights(
    name: str, seed: int, params: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """A freshly initialised model (Paddle's initialisers, `paddle.seed(seed)`), exported; a
    transformer is shaped by `params` (the catalogue's defaults where missing)."""
    if name in TRANSFORMER_NAMES:
        config = transformers.config_for(name, params)
        return weights.export(transformers.build_transformer(config, seed))
    return weights.export(models.build_model(name, seed))


def loaded(
    name: str, canonical: Weights, *, dropout: bool = True, dtype: str = "float32"
) -> nn.Layer:
    """`name` holding `canonical` weights, in training mode; dropout off when asked."""
    model = models.build_model(name, dtype=dtype)
    weights.load(model, canonical)
    if not dropout:
        for layer in model.sublayers():
            if isinstance(layer, nn.Dropout):
                layer.p = 0.0
    return model


def _inputs(name: str, array: np.ndarray, dtype: str = "float32") -> paddle.Tensor:
    if name == "lstm":
        return paddle.to_tensor(np.asarray(array, dtype=np.int64))
    return paddle.to_tensor(np.asarray(array, dtype=dtype))


def equivalence(case: EquivalenceCase) -> EquivalenceResult:
    """EquivalenceCase's steps, in dygraph mode: eval logits, the training-mode loss, one
    Momentum step (the benchmark's optimizer), the training-mode loss again."""
    if case.model in TRANSFORMER_NAMES:
        return transformer_equivalence(case)
    model = loaded(case.model, case.weights, dropout=False)
    inputs = _inputs(case.model, case.inputs)
    labels = paddle.to_tensor(np.asarray(case.labels, dtype=np.int64))
    model.eval()
    with paddle.no_grad():
        logits = model(inputs)
    step = TrainStep(model, "dygraph", case.optimizer.learning_rate, case.optimizer.momentum)
    loss_before = step(inputs, labels)
    with paddle.no_grad():
        loss_after = functional.cross_entropy(model(inputs), labels)
    return EquivalenceResult(
        param_count=models.trainable_count(model),
        eval_logits=np.asarray(logits.numpy(), dtype=np.float32),
        loss_before=float(loss_before),
        loss_after=float(loss_after),
    )


def transformer_equivalence(case: EquivalenceCase) -> EquivalenceResult:
    """EquivalenceCase's steps for bert or gpt (the language-model loss over the labelled
    positions), and for gpt with new_tokens the generate workload's greedy decoding (its
    benchmark path: prefill, then decode steps on the KV cache), on the loaded weights
    before the optimizer step; dygraph mode, float32."""
    config = transformers.config_for(case.model, case.params)
    model = transformers.build_transformer(config)
    weights.load(model, case.weights)
    tokens = paddle.to_tensor(np.asarray(case.inputs, dtype=np.int64))
    labels = paddle.to_tensor(np.asarray(case.labels, dtype=np.int64))
    model.eval()
    with paddle.no_grad():
        logits = model(tokens)
    generated = gaps = None
    if case.new_tokens:
        if not isinstance(model, transformers.GPT2LMHeadModel):
            raise ValueError(f"{case.model} does not generate: new_tokens is for gpt")
        batch, prompt_len = np.shape(case.inputs)
        params = {**case.params, "prompt_len": prompt_len, "new_tokens": case.new_tokens}
        steps, run = build_generation(
            params, batch, "float32", 0, "dygraph", model, case.inputs, keep_gaps=True
        )
        steps.generate()
        generated = np.stack(run.tokens, axis=1).astype(np.int64)
        gaps = np.stack(run.gaps, axis=1).astype(np.float32)
    loss = language_model.LanguageModelLoss
    step = TrainStep(
        model, "dygraph", case.optimizer.learning_rate, case.optimizer.momentum, with_loss=loss
    )
    loss_before = step(tokens, labels)
    with paddle.no_grad():
        loss_after = loss(model)(tokens, labels)
    return EquivalenceResult(
        param_count=models.trainable_count(model),
        eval_logits=np.asarray(logits.numpy(), dtype=np.float32),
        loss_before=float(loss_before),
        loss_after=float(loss_after),
        generated=generated,
        generated_gaps=gaps,
    )


class _Logits(nn.Layer):
    """The model's forward as its own Layer, so that static mode converts this wrapper and
    leaves the model's forward (which the training program calls) as it is."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, inputs: paddle.Tensor) -> paddle.Tensor:
        logits: paddle.Tensor = self.model(inputs)
        return logits


class PaddleTrainer:
    """Trains a loaded model on the runtime's host batches (capability "accuracy")."""

    def __init__(
        self,
        name: str,
        canonical: Weights,
        optimizer: OptimizerSpec,
        *,
        dtype: str,
        mode: str,
        settings: Settings,
    ) -> None:
        self.settings = settings
        self._name, self._dtype = name, dtype
        model = loaded(name, canonical, dtype=dtype)
        self._step = TrainStep(model, mode, optimizer.learning_rate, optimizer.momentum)
        self._logits = _Logits(model)
        self._forward = compile_layer(self._logits, mode)

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> object:
        targets = paddle.to_tensor(np.asarray(labels, dtype=np.int64))
        return self._step(_inputs(self._name, images, self._dtype), targets)

    def predict(self, images: np.ndarray) -> np.ndarray:
        self._logits.eval()
        try:
            with paddle.no_grad():
                logits = self._forward(_inputs(self._name, images, self._dtype))
            return np.asarray(paddle.argmax(logits, axis=1).numpy(), dtype=np.int64)
        finally:
            self._logits.train()
