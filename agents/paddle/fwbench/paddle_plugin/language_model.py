"""What the transformers (transformers.py) train on: the language-model loss and the
synthetic batch of a bert or gpt cell."""

# Paddle types Layer.__call__ as returning Any.
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import numpy as np
import paddle
from paddle import nn
from paddle.nn import functional

from fwbench.runtime.architectures import IGNORED_LABEL, TransformerConfig, mlm_positions


class LanguageModelLoss(nn.Layer):
    """The model's logits and the mean softmax cross-entropy over the positions whose label is
    not IGNORED_LABEL, in float32 (as PyTorch's cross_entropy(ignore_index=-100) on `.float()`
    logits), as one Layer (what static mode converts; training.TrainStep's `with_loss`).
    Paddle's own mean with `ignore_index` divides by every position, the ignored ones too
    (BERT's loss would be 1/15% of PyTorch's): the sum is divided by the labelled count."""

    def __init__(self, model: nn.Layer) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: paddle.Tensor, labels: paddle.Tensor) -> paddle.Tensor:
        logits = self.model(tokens)
        if logits.dtype != paddle.float32:
            logits = logits.astype("float32")
        flat = paddle.reshape(logits, [-1, int(logits.shape[-1])])
        labels = paddle.reshape(labels, [-1])
        losses = functional.cross_entropy(flat, labels, ignore_index=IGNORED_LABEL, reduction="sum")
        return losses / paddle.sum((labels != IGNORED_LABEL).astype("float32"))


def example_batch(
    config: TransformerConfig, batch: int, seq_len: int, seed: int
) -> tuple[paddle.Tensor, paddle.Tensor]:
    """Synthetic int64 (tokens, labels), each (batch, seq_len), drawn on the host: BERT's
    labels are random tokens at the masked-LM positions and IGNORED_LABEL elsewhere; GPT-2's
    a random next token at every position."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab, (batch, seq_len), dtype=np.int64)
    labels = rng.integers(0, config.vocab, (batch, seq_len), dtype=np.int64)
    if config.model == "bert":
        keep = np.zeros(seq_len, dtype=bool)
        keep[list(mlm_positions(seq_len))] = True
        labels = np.where(keep, labels, IGNORED_LABEL)
    return paddle.to_tensor(tokens), paddle.to_tensor(labels)
