"""BERT (Hugging Face's BertForMaskedLM layout) and GPT-2 (its GPT2LMHeadModel layout) as Keras 3
models: keras.layers (Dense, LayerNormalization, Embedding) and keras.ops only, one definition
for the torch, jax and tensorflow backends, layer for layer as the PyTorch plugin's
(agents/torch/fwbench/torch_plugin/transformers.py). Shapes come from the cell's parameters
(fwbench.runtime.architectures, "Transformers"); dropout is off.

Every layer that holds weights is built at once and recorded as a models.Mapped under its
Hugging Face name, so weights.py exports and loads canonical weights as for the other models
(Dense kernels (in, out) here, (out, in) canonical); the LM decoder is the word embedding,
tied, once. The models train through training.py (compile, train_on_batch) with the
language-model loss: sparse cross-entropy that ignores IGNORED_LABEL.

GPT-2 also runs generation (generation.py drives it) as pure functions of a KV cache, a list
of (batch, length, heads, head_dim) tensors, keys and values of each layer in turn, passed in
and handed back: `prefill` writes the prompt's at the start, `decode` one position with
keras.ops.slice_update and attends over the filled part, or over all of it with the rest
masked (static shapes: one compiled step for every position).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np

from fwbench.keras_plugin.attention import attend
from fwbench.keras_plugin.models import Mapped, Net
from fwbench.runtime.architectures import (
    BERT_TOKEN_TYPES,
    IGNORED_LABEL,
    TransformerConfig,
    mlm_positions,
    transformer_config,
)
from fwbench.spec import load_catalogue

Tensor = Any
Attention = Callable[[Tensor, Tensor, Tensor], Tensor]
Cache = list[Tensor]  # keys of layer 0, values of layer 0, keys of layer 1, ...


class Bias(keras.layers.Layer):  # type: ignore[misc]  # Keras is untyped
    """A bias of its own added to the last axis (BERT's MLM decoder's)."""

    def __init__(self, size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bias = self.add_weight(shape=(size,), initializer="zeros", name="bias")

    def call(self, x: Tensor) -> Tensor:
        return x + self.bias


class _Layers:
    """Makes layers built at once (their weights exist before the first call) and records
    each under its Hugging Face name."""

    def __init__(self) -> None:
        self.mapped: list[Mapped] = []

    def _add(self, prefix: str, kind: str, layer: keras.layers.Layer) -> Any:
        self.mapped.append(Mapped(prefix, kind, layer))
        return layer

    def dense(self, prefix: str, inputs: int, outputs: int) -> keras.layers.Dense:
        layer = keras.layers.Dense(outputs, name=prefix.replace(".", "_"))
        layer.build((None, inputs))
        return self._add(prefix, "dense", layer)

    def norm(self, prefix: str, features: int, eps: float) -> keras.layers.LayerNormalization:
        layer = keras.layers.LayerNormalization(epsilon=eps, name=prefix.replace(".", "_"))
        layer.build((None, features))
        return self._add(prefix, "layernorm", layer)

    def embedding(self, prefix: str, rows: int, features: int) -> keras.layers.Embedding:
        layer = keras.layers.Embedding(rows, features, name=prefix.replace(".", "_"))
        layer.build()
        return self._add(prefix, "embedding", layer)

    def bias(self, prefix: str, size: int) -> Bias:
        return self._add(prefix, "bias", Bias(size, name=prefix.replace(".", "_")))


def split_heads(x: Tensor, heads: int) -> Tensor:
    """(batch, seq, hidden) -> (batch, seq, heads, head_dim)."""
    seq, hidden = int(x.shape[1]), int(x.shape[2])
    return keras.ops.reshape(x, (-1, seq, heads, hidden // heads))


def merge_heads(x: Tensor) -> Tensor:
    seq, heads, head_dim = (int(n) for n in x.shape[1:])
    return keras.ops.reshape(x, (-1, seq, heads * head_dim))


def _tied_logits(x: Tensor, embedding: keras.layers.Embedding) -> Tensor:
    """x @ embedding^T: the LM head tied to the word embeddings."""
    return keras.ops.matmul(x, keras.ops.transpose(embedding.embeddings))


# --------------------------------------------------------------------------------------- BERT


class BertLayer(keras.layers.Layer):  # type: ignore[misc]
    def __init__(self, made: _Layers, name: str, config: TransformerConfig) -> None:
        super().__init__(name=name.replace(".", "_"))
        h, eps, attention = config.hidden, config.layer_norm_eps, f"{name}.attention"
        self.heads = config.heads
        self.query, self.key, self.value = (
            made.dense(f"{attention}.self.{part}", h, h) for part in ("query", "key", "value")
        )
        self.attention_dense = made.dense(f"{attention}.output.dense", h, h)
        self.attention_norm = made.norm(f"{attention}.output.LayerNorm", h, eps)
        self.intermediate = made.dense(f"{name}.intermediate.dense", h, config.intermediate)
        self.output_dense = made.dense(f"{name}.output.dense", config.intermediate, h)
        self.output_norm = made.norm(f"{name}.output.LayerNorm", h, eps)
        self.built = True

    def call(self, x: Tensor) -> Tensor:
        """Post-LayerNorm: each sublayer's output is added to its input, then normalised."""
        q, k, v = (
            split_heads(dense(x), self.heads) for dense in (self.query, self.key, self.value)
        )
        x = self.attention_norm(self.attention_dense(merge_heads(attend(q, k, v))) + x)
        inner = keras.ops.gelu(self.intermediate(x), approximate=False)
        return self.output_norm(self.output_dense(inner) + x)


class BertForMaskedLM(keras.Model):  # type: ignore[misc]
    """The encoder without its pooler and the MLM head, whose decoder is the word embeddings
    (tied) plus a bias of its own. Every token is of type 0."""

    def __init__(self, made: _Layers, config: TransformerConfig) -> None:
        super().__init__(name="bert")
        h, eps, prefix = config.hidden, config.layer_norm_eps, "bert.embeddings"
        self.word = made.embedding(f"{prefix}.word_embeddings", config.vocab, h)
        self.position = made.embedding(f"{prefix}.position_embeddings", config.positions, h)
        self.token_type = made.embedding(f"{prefix}.token_type_embeddings", BERT_TOKEN_TYPES, h)
        self.embedding_norm = made.norm(f"{prefix}.LayerNorm", h, eps)
        self.encoder = [
            BertLayer(made, f"bert.encoder.layer.{i}", config) for i in range(config.layers)
        ]
        self.transform = made.dense("cls.predictions.transform.dense", h, h)
        self.transform_norm = made.norm("cls.predictions.transform.LayerNorm", h, eps)
        self.decoder_bias = made.bias("cls.predictions", config.vocab)
        self.built = True

    def call(self, tokens: Tensor, training: bool = False) -> Tensor:
        """(batch, seq) token ids -> (batch, seq, vocab) logits; `training` changes nothing."""
        seq = int(tokens.shape[1])
        # Positions 0..seq-1 are the table's first rows: a slice, whose gradient is dense.
        x = self.word(tokens) + self.position.embeddings[:seq] + self.token_type.embeddings[0]
        x = self.embedding_norm(x)
        for layer in self.encoder:
            x = layer(x)
        x = self.transform_norm(keras.ops.gelu(self.transform(x), approximate=False))
        return self.decoder_bias(_tied_logits(x, self.word))


# -------------------------------------------------------------------------------------- GPT-2


class GPT2Block(keras.layers.Layer):  # type: ignore[misc]
    def __init__(self, made: _Layers, name: str, config: TransformerConfig) -> None:
        super().__init__(name=name.replace(".", "_"))
        h, eps = config.hidden, config.layer_norm_eps
        self.heads = config.heads
        self.ln_1 = made.norm(f"{name}.ln_1", h, eps)
        self.c_attn = made.dense(f"{name}.attn.c_attn", h, 3 * h)  # q, k, v along the output
        self.attn_proj = made.dense(f"{name}.attn.c_proj", h, h)
        self.ln_2 = made.norm(f"{name}.ln_2", h, eps)
        self.c_fc = made.dense(f"{name}.mlp.c_fc", h, config.intermediate)
        self.mlp_proj = made.dense(f"{name}.mlp.c_proj", config.intermediate, h)
        self.built = True

    def forward(self, x: Tensor, attention: Attention) -> Tensor:
        """Pre-LayerNorm; `attention` maps this block's (q, k, v) heads to its output heads
        (causal over the sequence, or over a KV cache)."""
        parts = keras.ops.split(self.c_attn(self.ln_1(x)), 3, axis=-1)
        q, k, v = (split_heads(part, self.heads) for part in parts)
        x = x + self.attn_proj(merge_heads(attention(q, k, v)))
        inner = keras.ops.gelu(self.c_fc(self.ln_2(x)), approximate=True)
        return x + self.mlp_proj(inner)


class GPT2LMHeadModel(keras.Model):  # type: ignore[misc]
    """GPT-2 with its LM head tied to the token embeddings (no bias). `call` runs whole
    sequences (training, inference); `prefill` and `decode` run a generation on a KV cache
    and return the logits of each sequence's last position only, and the cache."""

    def __init__(self, made: _Layers, config: TransformerConfig) -> None:
        super().__init__(name="gpt")
        self.config = config
        self.wte = made.embedding("transformer.wte", config.vocab, config.hidden)
        self.wpe = made.embedding("transformer.wpe", config.positions, config.hidden)
        self.h = [GPT2Block(made, f"transformer.h.{i}", config) for i in range(config.layers)]
        self.ln_f = made.norm("transformer.ln_f", config.hidden, config.layer_norm_eps)
        self.built = True

    def _logits(self, x: Tensor) -> Tensor:
        return _tied_logits(self.ln_f(x), self.wte)

    def call(self, tokens: Tensor, training: bool = False) -> Tensor:
        """(batch, seq) token ids -> (batch, seq, vocab) logits."""
        x = self.wte(tokens) + self.wpe.embeddings[: int(tokens.shape[1])]
        for block in self.h:
            x = block.forward(x, lambda q, k, v: attend(q, k, v, causal=True))
        return self._logits(x)

    def empty_cache(self, batch: int, length: int) -> Cache:
        c = self.config
        shape = (batch, length, c.heads, c.head_dim)
        return [keras.ops.zeros(shape, self.compute_dtype) for _ in range(2 * c.layers)]

    def prefill(self, tokens: Tensor, cache: Cache) -> tuple[Tensor, Cache]:
        """Causal attention over the prompt, whose keys and values fill the cache's start."""
        x = self.wte(tokens) + self.wpe.embeddings[: int(tokens.shape[1])]
        filled = list(cache)
        for i, block in enumerate(self.h):

            def prompt(q: Tensor, k: Tensor, v: Tensor, i: int = i) -> Tensor:
                filled[2 * i] = keras.ops.slice_update(filled[2 * i], (0, 0, 0, 0), k)
                filled[2 * i + 1] = keras.ops.slice_update(filled[2 * i + 1], (0, 0, 0, 0), v)
                return attend(q, k, v, causal=True)

            x = block.forward(x, prompt)
        return self._logits(x[:, -1]), filled

    def decode(
        self, token: Tensor, position: Tensor, cache: Cache, filled: int | None = None
    ) -> tuple[Tensor, Cache]:
        """token: (batch,) ids at `position` (0-d int32) -> (batch, vocab) logits and the
        cache with its key and value written; it attends to the first `filled` positions
        (eager), or, `filled` None, to all of them with those after `position` masked."""
        x = self.wte(token[:, None]) + keras.ops.take(self.wpe.embeddings, position, axis=0)
        length = int(cache[0].shape[1])
        seen = keras.ops.reshape(keras.ops.arange(length, dtype="int32") <= position, (1, 1, 1, -1))
        zero = keras.ops.zeros_like(position)
        at = (zero, position, zero, zero)
        written = list(cache)
        for i, block in enumerate(self.h):

            def cached(q: Tensor, k: Tensor, v: Tensor, i: int = i) -> Tensor:
                keys = written[2 * i] = keras.ops.slice_update(written[2 * i], at, k)
                values = written[2 * i + 1] = keras.ops.slice_update(written[2 * i + 1], at, v)
                if filled is not None:
                    return attend(q, keys[:, :filled], values[:, :filled])
                return attend(q, keys, values, mask=seen)

            x = block.forward(x, cached)
        return self._logits(x[:, -1]), written


# ------------------------------------------------------------------------------- public API

MODEL_WORKLOADS = ("bert", "gpt", "generate")  # the workloads that run these models


def config_for(workload: str, params: Mapping[str, int] | None = None) -> TransformerConfig:
    """The model of a transformer workload (bert's, or GPT-2's for gpt and generate); missing
    parameters take the catalogue's defaults."""
    model = "bert" if workload == "bert" else "gpt"
    defaults = {name: spec.default for name, spec in load_catalogue().get(model).params.items()}
    return transformer_config(model, {**defaults, **(params or {})})


def build_transformer(config: TransformerConfig) -> Net:
    """A freshly initialised model (Keras' own initialisers, seeded by
    keras.utils.set_random_seed) and its weight map."""
    made = _Layers()
    model = (BertForMaskedLM if config.model == "bert" else GPT2LMHeadModel)(made, config)
    return Net(config.model, model, made.mapped)


def language_model_loss() -> keras.losses.Loss:
    """Mean softmax cross-entropy over the positions whose label is not IGNORED_LABEL, as
    PyTorch's cross_entropy(ignore_index=-100): Keras masks those and averages over the rest."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=IGNORED_LABEL)


def example_batch(
    config: TransformerConfig, batch: int, seq_len: int, seed: int
) -> tuple[Any, Any]:
    """Synthetic int32 (tokens, labels), each (batch, seq_len): BERT's labels are random
    tokens at the masked-LM positions and IGNORED_LABEL elsewhere; GPT-2's a random next
    token at every position."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, config.vocab, (batch, seq_len), dtype=np.int32)
    labels = rng.integers(0, config.vocab, (batch, seq_len), dtype=np.int32)
    if config.model == "bert":
        keep = np.zeros(seq_len, dtype=bool)
        keep[list(mlm_positions(seq_len))] = True
        labels = np.where(keep, labels, IGNORED_LABEL).astype(np.int32)
    return keras.ops.convert_to_tensor(tokens), keras.ops.convert_to_tensor(labels)
