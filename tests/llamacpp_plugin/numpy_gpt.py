"""GPT-2 (GPT2LMHeadModel) in NumPy from canonical weights, in float64, with GELU either exact
(tanh approximation, as torch's) or as ggml's CPU backend computes it: GGML_GELU_FP16, defined
unconditionally in ggml-cpu/vec.h, rounds a float32 input to float16 and reads a float16 table
of ggml_gelu_f32 (inputs <= -10 give 0, >= 10 themselves). The tests use both to show that
llama.cpp's float32 logits equal the model but for that one op."""

from __future__ import annotations

import numpy as np

_SQRT_2_OVER_PI = np.float32(0.79788456080286535587989211986876)
_COEF = np.float32(0.044715)


def gelu_exact(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def gelu_ggml(x: np.ndarray) -> np.ndarray:
    """ggml_vec_gelu_f32 under GGML_GELU_FP16: the input as float32, rounded to float16 (F16C's
    round to nearest even, as NumPy's), the table's float32 GELU rounded to float16."""
    x32 = np.asarray(x, np.float32)
    h = x32.astype(np.float16).astype(np.float32)
    table = np.float32(0.5) * h * (1 + np.tanh(_SQRT_2_OVER_PI * h * (1 + _COEF * h * h)))
    looked_up = table.astype(np.float32).astype(np.float16).astype(np.float64)
    return np.where(x32 <= -10, 0.0, np.where(x32 >= 10, x32.astype(np.float64), looked_up))


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-5) * weight + bias


def gpt_logits(
    weights: dict[str, np.ndarray], tokens: np.ndarray, heads: int, ggml_gelu: bool
) -> np.ndarray:
    """(batch, seq, vocab) float64 logits of every position."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items()}
    gelu = gelu_ggml if ggml_gelu else gelu_exact
    batch, seq = tokens.shape
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:seq]
    hidden = x.shape[-1]
    dim = hidden // heads
    mask = np.triu(np.full((seq, seq), -np.inf), 1)
    layers = len({k.split(".")[2] for k in w if k.startswith("transformer.h.")})
    for i in range(layers):
        p = f"transformer.h.{i}."
        h = _layer_norm(x, w[p + "ln_1.weight"], w[p + "ln_1.bias"])
        qkv = h @ w[p + "attn.c_attn.weight"].T + w[p + "attn.c_attn.bias"]
        q, k, v = (
            part.reshape(batch, seq, heads, dim).transpose(0, 2, 1, 3)
            for part in np.split(qkv, 3, axis=-1)
        )
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(dim) + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        attended = (scores / scores.sum(-1, keepdims=True)) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        x = x + attended @ w[p + "attn.c_proj.weight"].T + w[p + "attn.c_proj.bias"]
        h = _layer_norm(x, w[p + "ln_2.weight"], w[p + "ln_2.bias"])
        h = gelu(h @ w[p + "mlp.c_fc.weight"].T + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"].T + w[p + "mlp.c_proj.bias"]
    x = _layer_norm(x, w["transformer.ln_f.weight"], w["transformer.ln_f.bias"])
    return x @ w["transformer.wte.weight"].T
