"""BERT (Hugging Face's BertForMaskedLM layout) and GPT-2 (its GPT2LMHeadModel layout) in pure
JAX, layer for layer as ``fwbench.torch_plugin.transformers``.

Written over a `Scope` (layers.py) as the other models, so parameter names are the Hugging Face
checkpoint names (fwbench.runtime.architectures, "Transformers") and dense kernels are (in, out)
here, (out, in) canonically. Shapes come from the cell's parameters (a TransformerConfig).
Activations are (batch, seq, hidden); attention works on (batch, seq, heads, head_dim), the
reshape of a projection (attention.py). Dropout is off.

GPT-2's blocks take the attention of each layer as a function, so that one architecture serves
the whole-sequence forward pass (training, inference), the prefill of a generation (which also
writes the prompt's keys and values into a KV cache) and its decode steps (one new token at a
traced position, attending over the cache); generation.py builds those.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import DTypeLike

from fwbench.jax_plugin.attention import XLA, Attention
from fwbench.jax_plugin.layers import (
    EMBEDDING_INIT,
    ONES,
    ZEROS,
    ParamSpec,
    Scope,
    collect_specs,
    dense,
    run_forward,
)
from fwbench.jax_plugin.models import Variables, init_variables
from fwbench.runtime.architectures import BERT_TOKEN_TYPES, TransformerConfig

# attend(layer, q, k, v) -> (batch, seq, heads, head_dim): one layer's attention.
Attend = Callable[[int, Array, Array, Array], Array]


# ------------------------------------------------------------------------------------ layers


def layer_norm(scope: Scope, x: Array, eps: float) -> Array:
    """PyTorch's LayerNorm over the last axis (biased variance); statistics in float32
    whatever the activation dtype, as PyTorch accumulates them."""
    features = x.shape[-1]
    weight = scope.param("weight", (features,), ONES)
    bias = scope.param("bias", (features,), ZEROS)
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
    normed = (x32 - mean) * lax.rsqrt(var + eps)
    return (normed * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def gelu(config: TransformerConfig, x: Array) -> Array:
    """GPT-2's tanh approximation, BERT's exact (erf) GELU."""
    return jax.nn.gelu(x, approximate=config.gelu_tanh)


def _heads(x: Array, heads: int) -> Array:
    """(batch, seq, hidden) -> (batch, seq, heads, head_dim): a reshape, no transpose."""
    return x.reshape(*x.shape[:-1], heads, x.shape[-1] // heads)


def _merge(x: Array) -> Array:
    return x.reshape(*x.shape[:-2], x.shape[-2] * x.shape[-1])


def _table(scope: Scope, rows: int, hidden: int) -> Array:
    """An nn.Embedding's weight, N(0, 1)."""
    return scope.param("weight", (rows, hidden), EMBEDDING_INIT)


# -------------------------------------------------------------------------------------- BERT


def _dense_norm(s: Scope, x: Array, residual: Array, eps: float) -> Array:
    """Dense, then LayerNorm of the residual sum (BERT's post-LayerNorm)."""
    return layer_norm(
        s.child("LayerNorm"), dense(s.child("dense"), x, residual.shape[-1]) + residual, eps
    )


def _bert(config: TransformerConfig, attention: Attention, s: Scope, tokens: Array) -> Array:
    """(batch, seq) token ids -> (batch, seq, vocab) logits."""
    hidden, eps = config.hidden, config.layer_norm_eps
    b, e = s.child("bert"), s.child("bert", "embeddings")
    words = _table(e.child("word_embeddings"), config.vocab, hidden)
    positions = _table(e.child("position_embeddings"), config.positions, hidden)
    types = _table(e.child("token_type_embeddings"), BERT_TOKEN_TYPES, hidden)
    # Every token is of type 0: the first row of the type table.
    x = jnp.take(words, tokens, axis=0) + positions[: tokens.shape[1]] + types[0]
    x = layer_norm(e.child("LayerNorm"), x, eps)
    for i in range(config.layers):
        layer = b.child("encoder", "layer", i)
        a = layer.child("attention")
        q, k, v = (
            _heads(dense(a.child("self", name), x, hidden), config.heads)
            for name in ("query", "key", "value")
        )
        x = _dense_norm(a.child("output"), _merge(attention(q, k, v)), x, eps)
        h = gelu(config, dense(layer.child("intermediate", "dense"), x, config.intermediate))
        x = _dense_norm(layer.child("output"), h, x, eps)
    p = s.child("cls", "predictions")
    bias = p.param("bias", (config.vocab,), ZEROS)  # declared first: PyTorch's state_dict order
    t = p.child("transform")
    x = layer_norm(t.child("LayerNorm"), gelu(config, dense(t.child("dense"), x, hidden)), eps)
    return jnp.einsum("bsh,vh->bsv", x, words) + bias  # the decoder: word embeddings, tied


# ------------------------------------------------------------------------------------ GPT-2


def _gpt(
    config: TransformerConfig,
    attend: Attend,
    s: Scope,
    tokens: Array,
    start: int | Array = 0,
    last_only: bool = False,
) -> Array:
    """(batch, seq) token ids at positions start, start + 1, ... -> (batch, seq, vocab)
    logits, or with `last_only` (batch, vocab) of the last position (the head's matmul runs
    on that position only)."""
    hidden, eps = config.hidden, config.layer_norm_eps
    t = s.child("transformer")
    wte = _table(t.child("wte"), config.vocab, hidden)
    wpe = _table(t.child("wpe"), config.positions, hidden)
    rows = lax.dynamic_slice_in_dim(wpe, start, tokens.shape[1])
    x = jnp.take(wte, tokens, axis=0) + rows
    for i in range(config.layers):
        block = t.child("h", i)
        y = layer_norm(block.child("ln_1"), x, eps)
        qkv = dense(block.child("attn", "c_attn"), y, 3 * hidden)
        q, k, v = (_heads(part, config.heads) for part in jnp.split(qkv, 3, axis=-1))
        x = x + dense(block.child("attn", "c_proj"), _merge(attend(i, q, k, v)), hidden)
        y = layer_norm(block.child("ln_2"), x, eps)
        y = gelu(config, dense(block.child("mlp", "c_fc"), y, config.intermediate))
        x = x + dense(block.child("mlp", "c_proj"), y, hidden)
    if last_only:
        x = x[:, -1]
    return layer_norm(t.child("ln_f"), x, eps) @ wte.T  # the LM head: wte, tied, no bias


def causal(attention: Attention) -> Attend:
    """Every layer's causal self-attention over the sequence itself."""
    return lambda _, q, k, v: attention(q, k, v, causal=True)


# ------------------------------------------------------------------------------- public API


@functools.cache
def param_specs(config: TransformerConfig) -> dict[str, ParamSpec]:
    """Every parameter of the model, in PyTorch's state_dict order; traces shapes only."""
    return collect_specs(
        lambda s, tokens: Transformer(config).forward(s, tokens),
        jax.ShapeDtypeStruct((1, 1), jnp.int32),
    )


@dataclass(frozen=True)
class Transformer:
    """One transformer (config.model "bert" or "gpt") and the attention it runs."""

    config: TransformerConfig
    attention: Attention = XLA

    def forward(self, s: Scope, tokens: Array) -> Array:
        if self.config.model == "bert":
            return _bert(self.config, self.attention, s, tokens)
        return _gpt(self.config, causal(self.attention), s, tokens)

    @property
    def specs(self) -> dict[str, ParamSpec]:
        return param_specs(self.config)

    def init(self, key: Array, dtype: DTypeLike = jnp.float32) -> Variables:
        """Freshly drawn parameters: PyTorch's default initialisation of each layer."""
        return init_variables(self.specs, key, dtype)

    def logits(self, params: Mapping[str, Array], tokens: Array) -> Array:
        """(batch, seq) token ids -> (batch, seq, vocab) logits of every position."""
        return run_forward(self.forward, params, {}, tokens, train=False, rng=None)[0]

    def gpt(
        self, params: Mapping[str, Array], tokens: Array, attend: Attend, start: int | Array
    ) -> Array:
        """GPT-2 with `attend` as each layer's attention: the last position's logits."""

        def forward(s: Scope, x: Array) -> Array:
            return _gpt(self.config, attend, s, x, start, last_only=True)

        return run_forward(forward, params, {}, tokens, train=False, rng=None)[0]

    def trainable_count(self) -> int:
        return sum(int(np.prod(spec.shape)) for spec in self.specs.values())

    def to_canonical(self, params: Mapping[str, Array]) -> dict[str, np.ndarray]:
        """PyTorch-layout float32 numpy arrays keyed by the checkpoint names."""
        return {
            name: spec.layout.to_canonical(np.asarray(params[name], np.float32))
            for name, spec in self.specs.items()
        }

    def from_canonical(
        self, weights: Mapping[str, np.ndarray], dtype: DTypeLike = jnp.float32
    ) -> Variables:
        """Loads canonical weights; every key must be known and every parameter assigned."""
        specs, name = self.specs, self.config.model
        unknown, missing = sorted(set(weights) - set(specs)), sorted(set(specs) - set(weights))
        if unknown or missing:
            raise ValueError(f"{name}: unknown weights {unknown}, missing weights {missing}")
        params: Variables = {}
        for key, spec in specs.items():
            given = np.asarray(weights[key])
            expected = spec.layout.canonical_shape(spec.shape)
            if given.shape != expected:
                raise ValueError(f"{name}: {key} has shape {given.shape}, not {expected}")
            params[key] = jnp.asarray(
                np.ascontiguousarray(spec.layout.from_canonical(given)), dtype
            )
        return params
