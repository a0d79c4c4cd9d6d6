"""BERT (BertForMaskedLM) and GPT-2 (GPT2LMHeadModel) written out in NumPy, float64, from
canonical weights (Hugging Face's names, (out, in) dense layouts): the reference the plugins
that build their own graphs (onnxruntime, openvino) are held to without torch in their
environments. Greedy generation recomputes the whole sequence each step (no cache), so that
a plugin's KV cache is checked against a computation that has none."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fwbench.runtime.architectures import TransformerConfig

Weights = Mapping[str, np.ndarray]
_ERF = np.vectorize(math.erf)


def _w(weights: Weights, name: str) -> np.ndarray:
    return np.asarray(weights[name], np.float64)


def layer_norm(x: np.ndarray, weights: Weights, path: str, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * _w(weights, f"{path}.weight") + _w(
        weights, f"{path}.bias"
    )


def linear(x: np.ndarray, weights: Weights, path: str) -> np.ndarray:
    return x @ _w(weights, f"{path}.weight").T + _w(weights, f"{path}.bias")


def gelu(x: np.ndarray, tanh: bool) -> np.ndarray:
    if tanh:
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + _ERF(x / math.sqrt(2)))


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, causal: bool) -> np.ndarray:
    """(batch, seq, hidden) each -> (batch, seq, hidden)."""
    batch, seq, hidden = q.shape

    def split(x: np.ndarray) -> np.ndarray:
        return x.reshape(batch, seq, heads, hidden // heads).transpose(0, 2, 1, 3)

    scores = split(q) @ split(k).transpose(0, 1, 3, 2) / math.sqrt(hidden // heads)
    if causal:
        scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return (probs @ split(v)).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)


def bert_logits(weights: Weights, tokens: np.ndarray, c: TransformerConfig) -> np.ndarray:
    p, eps = "bert.embeddings", c.layer_norm_eps
    words = _w(weights, f"{p}.word_embeddings.weight")
    x = words[tokens] + _w(weights, f"{p}.position_embeddings.weight")[: tokens.shape[1]]
    x = layer_norm(
        x + _w(weights, f"{p}.token_type_embeddings.weight")[0], weights, f"{p}.LayerNorm", eps
    )
    for i in range(c.layers):
        a = f"bert.encoder.layer.{i}.attention"
        q, k, v = (linear(x, weights, f"{a}.self.{n}") for n in ("query", "key", "value"))
        out = linear(attention(q, k, v, c.heads, False), weights, f"{a}.output.dense")
        x = layer_norm(out + x, weights, f"{a}.output.LayerNorm", eps)
        layer = f"bert.encoder.layer.{i}"
        inner = gelu(linear(x, weights, f"{layer}.intermediate.dense"), False)
        x = layer_norm(
            linear(inner, weights, f"{layer}.output.dense") + x,
            weights,
            f"{layer}.output.LayerNorm",
            eps,
        )
    t = "cls.predictions.transform"
    x = layer_norm(gelu(linear(x, weights, f"{t}.dense"), False), weights, f"{t}.LayerNorm", eps)
    return x @ words.T + _w(weights, "cls.predictions.bias")


def gpt_logits(weights: Weights, tokens: np.ndarray, c: TransformerConfig) -> np.ndarray:
    wte, eps = _w(weights, "transformer.wte.weight"), c.layer_norm_eps
    x = wte[tokens] + _w(weights, "transformer.wpe.weight")[: tokens.shape[1]]
    for i in range(c.layers):
        h = f"transformer.h.{i}"
        qkv = linear(layer_norm(x, weights, f"{h}.ln_1", eps), weights, f"{h}.attn.c_attn")
        q, k, v = np.split(qkv, 3, axis=-1)
        x = x + linear(attention(q, k, v, c.heads, True), weights, f"{h}.attn.c_proj")
        y = linear(layer_norm(x, weights, f"{h}.ln_2", eps), weights, f"{h}.mlp.c_fc")
        x = x + linear(gelu(y, True), weights, f"{h}.mlp.c_proj")
    return layer_norm(x, weights, "transformer.ln_f", eps) @ wte.T


def greedy(
    weights: Weights, prompt: np.ndarray, c: TransformerConfig, new_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """The tokens (batch, new_tokens) and each step's top-1 minus top-2 logit."""
    sequence, gaps = np.asarray(prompt), []
    for _ in range(new_tokens):
        last = gpt_logits(weights, sequence, c)[:, -1]
        top = np.sort(last, axis=-1)[:, -2:]
        gaps.append(top[:, 1] - top[:, 0])
        sequence = np.concatenate([sequence, last.argmax(-1)[:, None]], axis=1)
    return sequence[:, prompt.shape[1] :], np.stack(gaps, axis=1)
