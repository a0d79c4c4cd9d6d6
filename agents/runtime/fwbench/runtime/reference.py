"""The optional capabilities of a framework plugin: models as *reference* nets.

Benchmarks only need `FrameworkPlugin`. Proving that the "same" model really is the same in
every framework (capability "equivalence": `EquivalencePlugin`), and training one to a target
accuracy on identical data (capability "accuracy": `AccuracyPlugin`), need more methods, which
a plugin implements when it declares the capability (`FrameworkPlugin.optional_capabilities`,
checked at load by the registry). They all speak one framework-neutral currency:

**Canonical weights** -- a ``dict[str, numpy.ndarray]`` keyed by the PyTorch ``state_dict``
names of the catalogue models (``agents/torch/fwbench/torch_plugin/models.py``), float32, in
PyTorch layouts:

- convolution ``(out, in/groups, kh, kw)``; dense ``(out, in)``; biases ``(out,)``;
- a dense layer fed by a flattened feature map (lenet ``classifier.0``, vgg16
  ``classifier.0``) expects the features flattened in (C, H, W) order;
- BatchNorm ``weight``, ``bias``, ``running_mean``, ``running_var`` (``num_batches_tracked`` is
  not a weight and never appears);
- embedding ``(vocab, dim)``;
- LSTM with ONE bias vector (the Keras/Flax convention, which PyTorch reproduces with a zero
  second bias): ``lstm.weight_ih_l0 (4H, in)``, ``lstm.weight_hh_l0 (4H, H)``,
  ``lstm.bias_l0 (4H,)``, gates stacked in the order input, forget, cell, output;
- transformers (bert, gpt) under Hugging Face's checkpoint names (BertForMaskedLM,
  GPT2LMHeadModel), each tensor once (the tied LM decoder is the word embedding), dense
  weights ``(out, in)`` (GPT-2's c_attn, c_proj, c_fc: the transposes of Hugging Face's
  Conv1D), LayerNorm ``weight`` and ``bias``; their shapes follow the case's `params`.

**Canonical inputs** -- images ``(batch, channels, height, width)`` float32 (NCHW, whatever
layout the framework computes in), token ids ``(batch, seq_len)`` int64, labels ``(batch,)``
int64; for the transformers, labels ``(batch, seq_len)`` int64 with IGNORED_LABEL (-100) at
the positions the loss skips (BERT's unmasked ones), and logits ``(batch, seq_len, vocab)``.

The loss is always mean softmax cross-entropy on logits (a transformer's over its labelled
positions); the optimizer is SGD with classical momentum (``v = momentum * v + grad;
w -= lr * v``; no dampening, no weight decay, no Nesterov).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from fwbench.runtime.architectures import MODEL_NAMES, TRANSFORMER_NAMES
from fwbench.runtime.plugin import Settings, WorkloadSpec

Weights = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class OptimizerSpec:
    learning_rate: float
    momentum: float


@dataclass(frozen=True)
class EquivalenceCase:
    """One model, one set of canonical weights, one batch.

    The plugin builds `model` in float32 with every dropout rate at 0, loads `weights` (every
    key must be used and every model variable assigned, else it raises), and then:

    1. ``eval_logits``: the forward pass in inference mode (BatchNorm uses running stats);
    2. ``loss_before``: the loss of a training-mode forward pass (BatchNorm uses the batch's
       statistics) on the same batch;
    3. one optimizer step (`optimizer`) from that loss's gradients on every trainable weight;
    4. ``loss_after``: the training-mode loss on the same batch with the updated weights.
    """

    model: str
    weights: Weights
    inputs: np.ndarray
    labels: np.ndarray
    optimizer: OptimizerSpec
    # The model's shape parameters (the transformers'; resolved, defaults filled in).
    params: Mapping[str, int] = field(default_factory=dict)
    # gpt only, when > 0: also greedy generation of this many tokens from `inputs` as the
    # prompt with the loaded weights (before the optimizer step), on a KV cache, the plugin's
    # benchmark path for the generate workload.
    new_tokens: int = 0


@dataclass(frozen=True)
class EquivalenceResult:
    param_count: int  # trainable parameters (BatchNorm running statistics excluded)
    eval_logits: np.ndarray  # (batch, classes) float32; a transformer's (batch, seq, vocab)
    # None where the plugin's equivalence does not train (equivalence_trains False).
    loss_before: float | None
    loss_after: float | None
    # With EquivalenceCase.new_tokens: the tokens generated, (batch, new_tokens) int64, and at
    # each step the top-1 minus top-2 logit (batch, new_tokens) float32 that chose them.
    generated: np.ndarray | None = None
    generated_gaps: np.ndarray | None = None


class Trainer(Protocol):
    """A model being trained on host batches the runtime hands over, in the runtime's order."""

    settings: Settings  # what the training steps actually run with

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> object:
        """One optimizer step on this batch; returns what `FrameworkPlugin.synchronize` needs."""
        ...

    def predict(self, images: np.ndarray) -> np.ndarray:
        """Class ids (int64, shape (batch,)) in inference mode."""
        ...


class AccuracyPlugin(Protocol):
    """The methods of optional capability "accuracy"."""

    def canonical_weights(self, model: str, seed: int) -> dict[str, np.ndarray]:
        """A freshly initialised `model` (the framework's own initialisers, seeded) exported as
        canonical weights: names, shapes and layouts must equal PyTorch's."""
        ...

    def trainer(
        self, model: str, weights: Weights, optimizer: OptimizerSpec, spec: WorkloadSpec
    ) -> Trainer:
        """`model` loaded with canonical `weights`, ready to train with `optimizer` in
        `spec.mode`, `spec.dtype` and `spec.threads`."""
        ...


class EquivalencePlugin(Protocol):
    """The methods of optional capability "equivalence" (what fwbench-reference calls). A
    plugin that builds only some models says which in `equivalence_models`, and one that cannot
    train sets `equivalence_trains = False` (see the functions of those names)."""

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        """As `AccuracyPlugin.canonical_weights`; a transformer's shape is `params` (its
        workload's resolved parameters)."""
        ...

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        """Runs the steps documented on `EquivalenceCase`."""
        ...


def equivalence_models(plugin: object) -> frozenset[str]:
    """The models an equivalence plugin builds: its class attribute `equivalence_models`, a
    frozenset of catalogue model names; absent, every image, sequence and transformer model."""
    declared = getattr(plugin, "equivalence_models", None)
    if declared is None:
        return frozenset((*MODEL_NAMES, *TRANSFORMER_NAMES))
    if not isinstance(declared, frozenset) or not declared <= {*MODEL_NAMES, *TRANSFORMER_NAMES}:
        raise TypeError(f"equivalence_models must be a frozenset of model names, not {declared!r}")
    return declared


def equivalence_trains(plugin: object) -> bool:
    """Whether `equivalence` runs the training step (class attribute `equivalence_trains`,
    default True); an inference-only framework (ONNX Runtime) returns None for both losses."""
    return bool(getattr(plugin, "equivalence_trains", True))


def param_count(weights: Weights) -> int:
    """Trainable parameters among canonical weights (everything but BatchNorm statistics)."""
    return sum(
        int(np.prod(array.shape))
        for name, array in weights.items()
        if not name.endswith(("running_mean", "running_var"))
    )
