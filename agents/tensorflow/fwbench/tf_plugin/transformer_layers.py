"""What the transformers (transformers.py) are built of, on raw TensorFlow ops as layers.py's:
dense layers over (batch, seq, features), LayerNorm, GELU, attention; and the attention op
workload.

TensorFlow has no fused attention kernel (tf.nn has no counterpart of PyTorch's
scaled_dot_product_attention or of cuDNN's fused attention), so attention is the textbook
matmul-softmax-matmul in every mode; under XLA the mask and the softmax may fuse around the
two products, which stay separate GEMMs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from fwbench.runtime.architectures import IGNORED_LABEL, TransformerConfig, mlm_positions
from fwbench.tf_plugin.layers import Dense, ParamStore
from fwbench.tf_plugin.models import Batch
from fwbench.tf_plugin.training import compile_fn

ATTENTION_KERNEL = "plain: matmul, softmax, matmul (TensorFlow has no fused attention op)"
_HALF = (tf.float16, tf.bfloat16)


class Linear(Dense):
    """nn.Linear over any leading dimensions (static shapes): flattened to one MatMul +
    BiasAdd, the pair Grappler fuses, rather than a broadcast BatchMatMulV2."""

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        out = int(self.weight.shape[1])
        y = super().__call__(tf.reshape(x, (-1, int(x.shape[-1]))))
        return tf.reshape(y, (*x.shape[:-1], out))


class LayerNorm:
    """nn.LayerNorm over the last axis (biased variance). Half-precision inputs are normalised
    in float32 and cast back, as PyTorch's kernels compute them (float32 statistics); weight
    and bias are stored in the model's dtype."""

    def __init__(self, store: ParamStore, name: str, features: int, eps: float) -> None:
        self.gamma = store.new(f"{name}.weight", (features,), "ones")
        self.beta = store.new(f"{name}.bias", (features,), "zeros")
        self.eps = eps

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        dtype = x.dtype
        compute = tf.float32 if dtype in _HALF else dtype
        x = tf.cast(x, compute)
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        y = (x - mean) * tf.math.rsqrt(variance + self.eps)
        return tf.cast(y * tf.cast(self.gamma, compute) + tf.cast(self.beta, compute), dtype)


def gelu(config: TransformerConfig) -> Callable[[tf.Tensor], tf.Tensor]:
    """GPT-2's tanh approximation or BERT's exact (erf) GELU."""
    return lambda x: tf.nn.gelu(x, approximate=config.gelu_tanh)


def split_heads(x: tf.Tensor, heads: int) -> tf.Tensor:
    """(batch, seq, hidden) -> (batch, heads, seq, head_dim)."""
    batch, seq, hidden = x.shape
    return tf.transpose(tf.reshape(x, (batch, seq, heads, hidden // heads)), (0, 2, 1, 3))


def merge_heads(x: tf.Tensor) -> tf.Tensor:
    batch, heads, seq, head_dim = x.shape
    return tf.reshape(tf.transpose(x, (0, 2, 1, 3)), (batch, seq, heads * head_dim))


def causal_mask(queries: int, keys: int) -> tf.Tensor:
    """(queries, keys) bool: each query, the last `queries` positions of the keys, sees the
    keys up to its own position."""
    return tf.range(keys)[None, :] <= tf.range(queries)[:, None] + (keys - queries)


def attend(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, seen: tf.Tensor | None = None) -> tf.Tensor:
    """softmax(Q K^T / sqrt(head_dim)) V as three operations, in the inputs' dtype; `seen`
    (broadcast to the scores) masks the keys a query must not see."""
    scores = tf.matmul(q, k, transpose_b=True) * tf.cast(int(q.shape[-1]) ** -0.5, q.dtype)
    if seen is not None:
        scores = tf.where(seen, scores, tf.constant(-np.inf, scores.dtype))
    return tf.matmul(tf.nn.softmax(scores, axis=-1), v)


def build_attention(
    batch: int, params: Mapping[str, int], dtype: tf.DType, seed: int, train: bool, mode: str
) -> Callable[[], object]:
    """The attention op's step on (batch, heads, seq_len, head_dim) Q, K, V: the forward; in
    training also the gradients of Q, K and V for an all-ones upstream gradient, returned
    with the output so that a tf.function keeps the forward (ops.py says why)."""
    shape = (batch, params["heads"], params["seq_len"], params["head_dim"])
    rng = tf.random.Generator.from_seed(seed)
    q, k, v = (rng.normal(shape, dtype=dtype) for _ in range(3))
    seen = causal_mask(shape[2], shape[2]) if params["causal"] else None

    def forward() -> tf.Tensor:
        return attend(q, k, v, seen)

    if not train:
        return compile_fn(forward, mode)
    upstream = tf.ones(shape, dtype=dtype)

    def train_step() -> object:
        with tf.GradientTape() as tape:
            tape.watch([q, k, v])
            out = forward()
        return out, tape.gradient(out, [q, k, v], output_gradients=upstream)

    return compile_fn(train_step, mode)


def language_model_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """Mean softmax cross-entropy in float32 over the positions whose label is not
    IGNORED_LABEL, as PyTorch's cross_entropy(ignore_index=-100) on `.float()` logits: a
    weighted mean rather than a boolean mask, so that shapes stay static (XLA)."""
    logits = tf.cast(tf.reshape(logits, (-1, int(logits.shape[-1]))), tf.float32)
    labels = tf.reshape(labels, (-1,))
    kept = tf.not_equal(labels, IGNORED_LABEL)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.where(kept, labels, tf.zeros_like(labels)), logits=logits
    )
    weights = tf.cast(kept, tf.float32)
    return tf.reduce_sum(losses * weights) / tf.reduce_sum(weights)


def example_batch(
    config: TransformerConfig, batch: int, seq_len: int, seed: int, device: str
) -> Batch:
    """Synthetic int64 (tokens, labels), each (batch, seq_len): BERT's labels are random
    tokens at the masked-LM positions and IGNORED_LABEL elsewhere; GPT-2's a random next
    token at every position."""
    with tf.device(device):
        rng = tf.random.Generator.from_seed(seed)
        shape = (batch, seq_len)
        tokens = rng.uniform(shape, 0, config.vocab, dtype=tf.int64)
        labels = rng.uniform(shape, 0, config.vocab, dtype=tf.int64)
        if config.model == "bert":
            keep = np.zeros((1, seq_len), dtype=bool)
            keep[0, list(mlm_positions(seq_len))] = True
            ignored = tf.fill(shape, tf.constant(IGNORED_LABEL, tf.int64))
            labels = tf.where(tf.constant(keep), labels, ignored)
    return Batch(tokens, labels)
