"""BERT (Hugging Face's BertForMaskedLM layout) and GPT-2 (its GPT2LMHeadModel layout) on raw
TensorFlow ops, layer for layer as the PyTorch plugin's (agents/torch/fwbench/torch_plugin/
transformers.py): every weight in a ParamStore under its Hugging Face checkpoint name, dense
kernels stored (in, out) and exported (out, in), each tied weight once. Shapes come from the
cell's parameters (fwbench.runtime.architectures, "Transformers"); dropout is off.

GPT-2 also runs generation on a KVCache (generation.py drives it): `prefill` fills the cache's
start with the prompt's keys and values, `decode` writes one position in place and attends
over the cache, either its filled part or all of it with the rest masked (static shapes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import tensorflow as tf

from fwbench.runtime.architectures import BERT_TOKEN_TYPES, TransformerConfig, transformer_config
from fwbench.spec import load_catalogue
from fwbench.tf_plugin.layers import Embedding, ParamStore
from fwbench.tf_plugin.training import ModelProgram
from fwbench.tf_plugin.transformer_layers import (
    LayerNorm,
    Linear,
    attend,
    causal_mask,
    example_batch,
    gelu,
    language_model_loss,
    merge_heads,
    split_heads,
)

Attention = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], tf.Tensor]
MODEL_WORKLOADS = ("bert", "gpt", "generate")  # the workloads that run these models
# How the models hold and compute each dtype (Settings.extra["dtype_policy"]).
DTYPE_POLICY = {
    "float32": "float32",
    "float64": "float64; language-model loss in float32 (as PyTorch's .float() logits)",
    **{
        half: f"{half} pure: weights, activations and gradients in {half}; LayerNorm "
        f"normalises in float32 and casts back (weight and bias {half}); attention softmax in "
        f"{half}; language-model loss in float32"
        for half in ("bfloat16", "float16")
    },
}


def _tied_logits(x: tf.Tensor, embedding: tf.Variable, bias: tf.Variable | None) -> tf.Tensor:
    """x @ embedding^T (+ bias) over (..., hidden): the LM head tied to the word embeddings."""
    vocab = int(embedding.shape[0])
    y = tf.matmul(tf.reshape(x, (-1, int(x.shape[-1]))), embedding, transpose_b=True)
    if bias is not None:
        y = tf.nn.bias_add(y, bias)
    return tf.reshape(y, (*x.shape[:-1], vocab))


# --------------------------------------------------------------------------------------- BERT


class BertLayer:
    def __init__(self, store: ParamStore, name: str, config: TransformerConfig) -> None:
        h, eps, attention = config.hidden, config.layer_norm_eps, f"{name}.attention"
        self.heads, self.activation = config.heads, gelu(config)
        self.query, self.key, self.value = (
            Linear(store, f"{attention}.self.{part}", h, h) for part in ("query", "key", "value")
        )
        self.attention_dense = Linear(store, f"{attention}.output.dense", h, h)
        self.attention_norm = LayerNorm(store, f"{attention}.output.LayerNorm", h, eps)
        self.intermediate = Linear(store, f"{name}.intermediate.dense", h, config.intermediate)
        self.output_dense = Linear(store, f"{name}.output.dense", config.intermediate, h)
        self.output_norm = LayerNorm(store, f"{name}.output.LayerNorm", h, eps)

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """Post-LayerNorm: each sublayer's output is added to its input, then normalised."""
        q, k, v = (
            split_heads(layer(x), self.heads) for layer in (self.query, self.key, self.value)
        )
        x = self.attention_norm(self.attention_dense(merge_heads(attend(q, k, v))) + x)
        return self.output_norm(self.output_dense(self.activation(self.intermediate(x))) + x)


class BertForMaskedLM:
    """The encoder without its pooler and the MLM head, whose decoder is the word embeddings
    (tied) plus a bias of its own. Every token is of type 0."""

    def __init__(self, store: ParamStore, config: TransformerConfig) -> None:
        self.store, self.config = store, config
        h, eps, prefix = config.hidden, config.layer_norm_eps, "bert.embeddings"
        self.word = Embedding(store, f"{prefix}.word_embeddings", config.vocab, h)
        self.position = Embedding(store, f"{prefix}.position_embeddings", config.positions, h)
        self.token_type = Embedding(store, f"{prefix}.token_type_embeddings", BERT_TOKEN_TYPES, h)
        self.embedding_norm = LayerNorm(store, f"{prefix}.LayerNorm", h, eps)
        self.layers = [
            BertLayer(store, f"bert.encoder.layer.{i}", config) for i in range(config.layers)
        ]
        self.decoder_bias = store.new("cls.predictions.bias", (config.vocab,), "zeros")
        self.transform = Linear(store, "cls.predictions.transform.dense", h, h)
        self.transform_norm = LayerNorm(store, "cls.predictions.transform.LayerNorm", h, eps)
        self.activation = gelu(config)

    def __call__(self, tokens: tf.Tensor, training: bool = False) -> tf.Tensor:
        """(batch, seq) int64 token ids -> (batch, seq, vocab) logits; `training` changes
        nothing (no dropout)."""
        seq = int(tokens.shape[1])
        # Positions 0..seq-1 are the table's first rows: a slice, whose gradient is dense.
        x = self.word(tokens) + self.position.weight[:seq] + self.token_type.weight[0]
        x = self.embedding_norm(x)
        for layer in self.layers:
            x = layer(x)
        x = self.transform_norm(self.activation(self.transform(x)))
        return _tied_logits(x, self.word.weight, self.decoder_bias)


# -------------------------------------------------------------------------------------- GPT-2


class KVCache:
    """Keys and values of every layer, (batch, heads, length, head_dim) each, preallocated as
    tf.Variables and written in place: the prompt's with a strided-slice assign, each decode
    step's with a scatter (ResourceScatterNdUpdate) at a tensor position, so that one traced
    decode step serves every position. A scatter rather than a strided-slice assign at a
    tensor position: that op takes its bounds in host memory, so on a GPU every step would
    copy the position back to the host and wait for it."""

    def __init__(self, config: TransformerConfig, batch: int, length: int, dtype: tf.DType):
        shape = (batch, config.heads, length, config.head_dim)

        def zeros() -> list[tf.Variable]:
            return [
                tf.Variable(tf.zeros(shape, dtype), trainable=False) for _ in range(config.layers)
            ]

        self.keys, self.values = zeros(), zeros()
        self.length = length
        # (batch, heads, 2): the leading indices of each sequence's and head's entry.
        grid = np.stack(np.meshgrid(np.arange(batch), np.arange(config.heads), indexing="ij"), -1)
        self.grid = tf.constant(grid, tf.int64)

    def bytes(self) -> int:
        return sum(int(np.prod(v.shape)) * v.dtype.size for v in (*self.keys, *self.values))

    def fill(self, layer: int, k: tf.Tensor, v: tf.Tensor) -> None:
        """The prompt's keys and values into positions 0..prompt_len-1."""
        length = int(k.shape[2])
        self.keys[layer][:, :, :length].assign(k)
        self.values[layer][:, :, :length].assign(v)

    def write(self, layer: int, k: tf.Tensor, v: tf.Tensor, position: tf.Tensor) -> None:
        """One token's key and value, (batch, heads, 1, head_dim), at `position` (int64)."""
        at = tf.fill((*self.grid.shape[:2], 1), position)
        index = tf.concat([self.grid, at], axis=-1)
        self.keys[layer].scatter_nd_update(index, k[:, :, 0])
        self.values[layer].scatter_nd_update(index, v[:, :, 0])


class GPT2Block:
    def __init__(self, store: ParamStore, name: str, config: TransformerConfig) -> None:
        h, eps = config.hidden, config.layer_norm_eps
        self.heads, self.activation = config.heads, gelu(config)
        self.ln_1 = LayerNorm(store, f"{name}.ln_1", h, eps)
        self.c_attn = Linear(store, f"{name}.attn.c_attn", h, 3 * h)  # q, k, v along the output
        self.attn_proj = Linear(store, f"{name}.attn.c_proj", h, h)
        self.ln_2 = LayerNorm(store, f"{name}.ln_2", h, eps)
        self.c_fc = Linear(store, f"{name}.mlp.c_fc", h, config.intermediate)
        self.mlp_proj = Linear(store, f"{name}.mlp.c_proj", config.intermediate, h)

    def __call__(self, x: tf.Tensor, attention: Attention) -> tf.Tensor:
        """Pre-LayerNorm; `attention` maps this block's (q, k, v) heads to its output heads
        (causal over the sequence, or over a KV cache)."""
        q, k, v = (split_heads(t, self.heads) for t in tf.split(self.c_attn(self.ln_1(x)), 3, -1))
        x = x + self.attn_proj(merge_heads(attention(q, k, v)))
        return x + self.mlp_proj(self.activation(self.c_fc(self.ln_2(x))))


class GPT2LMHeadModel:
    """GPT-2 with its LM head tied to the token embeddings (no bias). `__call__` runs whole
    sequences (training, inference); `prefill` and `decode` run a generation on a KVCache and
    return the logits of each sequence's last position only."""

    def __init__(self, store: ParamStore, config: TransformerConfig) -> None:
        self.store, self.config = store, config
        self.wte = Embedding(store, "transformer.wte", config.vocab, config.hidden)
        self.wpe = Embedding(store, "transformer.wpe", config.positions, config.hidden)
        self.h = [GPT2Block(store, f"transformer.h.{i}", config) for i in range(config.layers)]
        eps = config.layer_norm_eps
        self.ln_f = LayerNorm(store, "transformer.ln_f", config.hidden, eps)

    def _logits(self, x: tf.Tensor) -> tf.Tensor:
        return _tied_logits(self.ln_f(x), self.wte.weight, None)

    def _embed(self, tokens: tf.Tensor) -> tf.Tensor:
        return self.wte(tokens) + self.wpe.weight[: int(tokens.shape[1])]

    def __call__(self, tokens: tf.Tensor, training: bool = False) -> tf.Tensor:
        """(batch, seq) int64 token ids -> (batch, seq, vocab) logits."""
        x = self._embed(tokens)
        seen = causal_mask(int(tokens.shape[1]), int(tokens.shape[1]))
        for block in self.h:
            x = block(x, lambda q, k, v: attend(q, k, v, seen))
        return self._logits(x)

    def prefill(self, tokens: tf.Tensor, cache: KVCache) -> tf.Tensor:
        """Causal attention over the prompt, whose keys and values fill the cache's start."""
        x = self._embed(tokens)
        seen = causal_mask(int(tokens.shape[1]), int(tokens.shape[1]))
        for i, block in enumerate(self.h):

            def prompt(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, i: int = i) -> tf.Tensor:
                cache.fill(i, k, v)
                return attend(q, k, v, seen)

            x = block(x, prompt)
        return self._logits(x[:, -1])

    def decode(
        self, token: tf.Tensor, position: tf.Tensor, cache: KVCache, filled: int | None
    ) -> tf.Tensor:
        """token: (batch,) ids at `position` (0-d int64) -> (batch, vocab) logits. Its key and
        value join the cache; it attends to the first `filled` positions (eager), or, `filled`
        None, to all of them with those after `position` masked (static shapes)."""
        x = self.wte(token[:, None]) + tf.gather(self.wpe.weight, position)
        seen = None if filled is not None else tf.range(cache.length, dtype=tf.int64) <= position
        for i, block in enumerate(self.h):

            def cached(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, i: int = i) -> tf.Tensor:
                cache.write(i, k, v, position)
                keys, values = cache.keys[i], cache.values[i]
                if filled is not None:
                    return attend(q, keys[:, :, :filled], values[:, :, :filled])
                return attend(q, keys, values, seen)

            x = block(x, cached)
        return self._logits(x[:, -1])


# ------------------------------------------------------------------------------- public API

Transformer = BertForMaskedLM | GPT2LMHeadModel


def config_for(workload: str, params: Mapping[str, int] | None = None) -> TransformerConfig:
    """The model of a transformer workload (bert's, or GPT-2's for gpt and generate); missing
    parameters take the catalogue's defaults."""
    model = "bert" if workload == "bert" else "gpt"
    defaults = {name: spec.default for name, spec in load_catalogue().get(model).params.items()}
    return transformer_config(model, {**defaults, **(params or {})})


def build_transformer(
    config: TransformerConfig,
    *,
    dtype: tf.DType = tf.float32,
    seed: int = 0,
    device: str = "/CPU:0",
) -> Transformer:
    """A freshly initialised model, reproducible from `seed`, its variables on `device`:
    Keras' default initialisation as models.py's (the benchmarks never train it to anything;
    equivalence loads canonical weights)."""
    store = ParamStore(dtype, seed, on_gpu="GPU" in device.upper())
    with tf.device(device):
        return (BertForMaskedLM if config.model == "bert" else GPT2LMHeadModel)(store, config)


def build_step(
    workload: str,
    batch: int,
    params: Mapping[str, int],
    dtype: tf.DType,
    seed: int,
    device: str,
    train: bool,
    mode: str,
) -> Callable[[], object]:
    """bert or gpt: inference gives every position's logits; a training step is the
    language-model loss (float32), its gradients and MomentumSGD on every variable."""
    config = config_for(workload, params)
    model = build_transformer(config, dtype=dtype, seed=seed, device=device)
    data = example_batch(config, batch, params["seq_len"], seed, device)
    if not train:
        program = ModelProgram(model, mode)
        return lambda: program.logits(data.inputs)
    program = ModelProgram.for_training(model, mode, loss=language_model_loss)
    return lambda: program.train_step(data.inputs, data.labels)
