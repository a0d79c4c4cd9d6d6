"""The transformers as ONNX graphs (onnx.helper, standard ops at graphs.OPSET): the attention
op, BERT (Hugging Face's BertForMaskedLM layout) and GPT-2 (its GPT2LMHeadModel layout), node
for node agents/torch/fwbench/torch_plugin/transformers.py, the weights under its state_dict
names (Hugging Face's checkpoint names) in (out, in) layouts, drawn from PyTorch's default
initialisers (seeded) when none are given.

Activations run as (tokens, features) matrices, so that every nn.Linear is one Gemm
(transB=1) on the canonical weight as stored and the tied LM heads read the embedding table
itself (a layer feeding a residual sum adds its bias to the residual instead: residual_linear
says why); only attention reshapes to (batch, heads, seq, head_dim), the keys transposed to
(batch, heads, head_dim, seq) as they are made, so that Q K^T is one MatMul. Attention is
MatMul, Softmax, MatMul: ONNX has no attention op at this opset. The causal mask is a constant
of 0 and -inf added to the scores (as PyTorch's masked_fill). LayerNormalization and Gelu
(approximate "tanh" for GPT-2, exact for BERT) are ONNX's own ops. Framework-free (onnx and
numpy only): the openvino plugin imports it."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from onnx import TensorProto

from fwbench.onnxruntime_plugin.graphs import (
    BATCH_AXIS,
    ONES,
    ZEROS,
    GraphBuilder,
    Init,
    Parameters,
    fan_in_uniform,
    tensor_input,
)
from fwbench.onnxruntime_plugin.models import INPUT, OUTPUT, Graph
from fwbench.runtime.architectures import (
    BERT_TOKEN_TYPES,
    TRANSFORMER_NAMES,
    TransformerConfig,
    transformer_config,
)

EMBEDDING = Init("normal", 1.0)  # nn.Embedding's default
ATTENTION_LAYOUT = "q, v (batch, heads, seq_len, head_dim); k_t (batch, heads, head_dim, seq_len)"
ATTENTION_KERNEL = "plain: MatMul, Softmax, MatMul (ONNX has no attention op at this opset)"
# An attention of one layer: Q, K, V as (tokens, hidden) and the layer's path -> the context,
# (tokens, hidden).
Attend = Callable[[str, str, str, str], str]


# ------------------------------------------------------------------------------------ layers


def reshape(b: GraphBuilder, x: str, dims: tuple[int, ...], path: str) -> str:
    shape = b.constant("shape." + "x".join(map(str, dims)), np.array(dims, np.int64))
    return b.node("Reshape", [x, shape], path)


def int64_constant(b: GraphBuilder, name: str, array: object) -> str:
    return b.constant(name, np.array(array, np.int64))


def layer_norm(b: GraphBuilder, x: str, path: str, features: int, eps: float) -> str:
    """nn.LayerNorm over the last axis (ONNX's LayerNormalization: biased variance)."""
    gamma = b.weight(f"{path}.weight", (features,), ONES)
    beta = b.weight(f"{path}.bias", (features,), ZEROS)
    return b.node("LayerNormalization", [x, gamma, beta], path, axis=-1, epsilon=eps)


def gelu(b: GraphBuilder, x: str, path: str, config: TransformerConfig) -> str:
    return b.node("Gelu", [x], path, approximate="tanh" if config.gelu_tanh else "none")


def residual_linear(
    b: GraphBuilder, x: str, residual: str, path: str, n_in: int, n_out: int
) -> str:
    """residual + nn.Linear(x), summed as (residual + bias) + x W^T: a bias-free Gemm. With
    the bias in the Gemm (or a MatMul and an Add), OpenVINO 2026.4.1 crashed (SIGSEGV in
    compile_model) on a graph of a few rows and a small width (16 to 64) wherever the residual
    was itself a sum, on one thread a stream (one thread, or "throughput" on two CPUs); this
    order compiled. Only the float32 rounding of the sum differs from nn.Linear's."""
    init = fan_in_uniform(n_in)
    w = b.weight(f"{path}.weight", (n_out, n_in), init)
    bias = b.weight(f"{path}.bias", (n_out,), init)
    shifted = b.node("Add", [residual, bias], f"{path}.residual")
    return b.node("Add", [shifted, b.node("Gemm", [x, w], path, transB=1)], f"{path}.add")


def split_heads(
    b: GraphBuilder, x: str, path: str, config: TransformerConfig, seq: int, keys: bool = False
) -> str:
    """(batch * seq, hidden) -> (batch, heads, seq, head_dim); keys (batch, heads, head_dim,
    seq), ready to be multiplied by the queries."""
    y = reshape(b, x, (-1, seq, config.heads, config.head_dim), f"{path}.view")
    return b.node("Transpose", [y], path, perm=[0, 2, 3, 1] if keys else [0, 2, 1, 3])


def merge_heads(b: GraphBuilder, x: str, path: str, config: TransformerConfig) -> str:
    """(batch, heads, seq, head_dim) -> (batch * seq, hidden)."""
    y = b.node("Transpose", [x], f"{path}.merge", perm=[0, 2, 1, 3])
    return reshape(b, y, (-1, config.hidden), f"{path}.merged")


def scaled_scores(b: GraphBuilder, q: str, kt: str, path: str, head_dim: int) -> str:
    """Q K^T / sqrt(head_dim), the scale applied to the product as PyTorch's plain path."""
    scale = b.constant(f"attention.scale.{head_dim}", np.array(head_dim**-0.5, np.float32))
    return b.node("Mul", [b.node("MatMul", [q, kt], f"{path}.scores"), scale], f"{path}.scaled")


def causal_mask(b: GraphBuilder, queries: int, keys: int) -> str:
    """(queries, keys): 0 where a query (the last `queries` positions) sees the key, -inf
    where the key lies after it."""
    seen = np.tril(np.ones((queries, keys), dtype=bool), keys - queries)
    return b.constant(f"causal_mask.{queries}x{keys}", np.where(seen, 0.0, -np.inf).astype("f4"))


def attend(
    b: GraphBuilder, q: str, kt: str, v: str, path: str, head_dim: int, mask: str | None
) -> str:
    """softmax(Q K^T / sqrt(d) + mask) V on (batch, heads, ...) operands."""
    scores = scaled_scores(b, q, kt, path, head_dim)
    if mask is not None:
        scores = b.node("Add", [scores, mask], f"{path}.masked")
    probs = b.node("Softmax", [scores], f"{path}.softmax", axis=-1)
    return b.node("MatMul", [probs, v], f"{path}.context")


def self_attention(
    b: GraphBuilder, config: TransformerConfig, seq: int, kept: list[tuple[str, str]] | None = None
) -> Attend:
    """Attention over the sequence itself (causal for GPT-2); `kept` collects each layer's
    keys (batch, heads, head_dim, seq) and values (batch, heads, seq, head_dim)."""
    mask = causal_mask(b, seq, seq) if config.causal else None

    def run(q: str, k: str, v: str, path: str) -> str:
        qh = split_heads(b, q, f"{path}.q", config, seq)
        kt = split_heads(b, k, f"{path}.k", config, seq, keys=True)
        vh = split_heads(b, v, f"{path}.v", config, seq)
        if kept is not None:
            kept.append((kt, vh))
        return merge_heads(b, attend(b, qh, kt, vh, path, config.head_dim, mask), path, config)

    return run


def embed(b: GraphBuilder, table: str, ids: str, path: str) -> str:
    return b.node("Gather", [table, ids], path)


# -------------------------------------------------------------------------------------- BERT


def _bert_layer(b: GraphBuilder, x: str, path: str, c: TransformerConfig, attn: Attend) -> str:
    h, eps, a = c.hidden, c.layer_norm_eps, f"{path}.attention"
    q, k, v = (b.linear(x, f"{a}.self.{n}", h, h) for n in ("query", "key", "value"))
    out = residual_linear(b, attn(q, k, v, f"{a}.self"), x, f"{a}.output.dense", h, h)
    x = layer_norm(b, out, f"{a}.output.LayerNorm", h, eps)
    inner = gelu(b, b.linear(x, f"{path}.intermediate.dense", h, c.intermediate), path, c)
    out = residual_linear(b, inner, x, f"{path}.output.dense", c.intermediate, h)
    return layer_norm(b, out, f"{path}.output.LayerNorm", h, eps)


def _bert(b: GraphBuilder, tokens: str, c: TransformerConfig, seq: int) -> str:
    p, h = "bert.embeddings", c.hidden
    words = b.weight(f"{p}.word_embeddings.weight", (c.vocab, h), EMBEDDING)
    positions = b.weight(f"{p}.position_embeddings.weight", (c.positions, h), EMBEDDING)
    types = b.weight(f"{p}.token_type_embeddings.weight", (BERT_TOKEN_TYPES, h), EMBEDDING)
    x = embed(b, words, tokens, f"{p}.word_embeddings")
    at = embed(b, positions, int64_constant(b, f"positions.{seq}", np.arange(seq)), f"{p}.pos")
    x = b.node("Add", [x, at], f"{p}.add_positions")
    # Every token is of type 0: the first row of the type table.
    x = b.node("Add", [x, embed(b, types, int64_constant(b, "zero", 0), f"{p}.types")], f"{p}.add")
    x = layer_norm(b, reshape(b, x, (-1, h), f"{p}.rows"), f"{p}.LayerNorm", h, c.layer_norm_eps)
    attn = self_attention(b, c, seq)
    for i in range(c.layers):
        x = _bert_layer(b, x, f"bert.encoder.layer.{i}", c, attn)
    t = "cls.predictions.transform"
    x = gelu(b, b.linear(x, f"{t}.dense", h, h), f"{t}.activation", c)
    x = layer_norm(b, x, f"{t}.LayerNorm", h, c.layer_norm_eps)
    bias = b.weight("cls.predictions.bias", (c.vocab,), ZEROS)
    logits = b.node("Gemm", [x, words, bias], "cls.predictions.decoder", transB=1)
    return reshape(b, logits, (-1, seq, c.vocab), OUTPUT)


# -------------------------------------------------------------------------------------- GPT-2


def gpt_block(b: GraphBuilder, x: str, path: str, c: TransformerConfig, attn: Attend) -> str:
    """Pre-LayerNorm: x + attn(ln_1(x)), then x + mlp(ln_2(x)); x (tokens, hidden)."""
    h, eps = c.hidden, c.layer_norm_eps
    y = b.linear(layer_norm(b, x, f"{path}.ln_1", h, eps), f"{path}.attn.c_attn", h, 3 * h)
    sizes = int64_constant(b, f"split.{h}", [h, h, h])
    q, k, v = b.node_outputs("Split", [y, sizes], [f"{path}.attn.{n}" for n in "qkv"], axis=1)
    x = residual_linear(b, attn(q, k, v, f"{path}.attn"), x, f"{path}.attn.c_proj", h, h)
    y = b.linear(layer_norm(b, x, f"{path}.ln_2", h, eps), f"{path}.mlp.c_fc", h, c.intermediate)
    y = gelu(b, y, f"{path}.mlp.act", c)
    return residual_linear(b, y, x, f"{path}.mlp.c_proj", c.intermediate, h)


def gpt_tables(b: GraphBuilder, c: TransformerConfig) -> tuple[str, str]:
    """The token and position tables (wte, wpe)."""
    wte = b.weight("transformer.wte.weight", (c.vocab, c.hidden), EMBEDDING)
    wpe = b.weight("transformer.wpe.weight", (c.positions, c.hidden), EMBEDDING)
    return wte, wpe


def gpt_embed(b: GraphBuilder, c: TransformerConfig, tokens: str, positions: str) -> str:
    """wte(tokens) + wpe(positions) as (tokens, hidden) rows."""
    wte, wpe = gpt_tables(b, c)
    x = b.node(
        "Add",
        [embed(b, wte, tokens, "transformer.wte"), embed(b, wpe, positions, "transformer.wpe")],
        "transformer.embed",
    )
    return reshape(b, x, (-1, c.hidden), "transformer.rows")


def gpt_head(b: GraphBuilder, x: str, c: TransformerConfig, name: str) -> str:
    """ln_f, then the LM head tied to the token table: (tokens, vocab) logits."""
    x = layer_norm(b, x, "transformer.ln_f", c.hidden, c.layer_norm_eps)
    return b.node("Gemm", [x, "transformer.wte.weight"], name, transB=1)


def _gpt(b: GraphBuilder, tokens: str, c: TransformerConfig, seq: int) -> str:
    x = gpt_embed(b, c, tokens, int64_constant(b, f"positions.{seq}", np.arange(seq)))
    attn = self_attention(b, c, seq)
    for i in range(c.layers):
        x = gpt_block(b, x, f"transformer.h.{i}", c, attn)
    return reshape(b, gpt_head(b, x, c, "lm_head"), (-1, seq, c.vocab), OUTPUT)


# ------------------------------------------------------------------------------- public API


def config_for(workload: str, params: Mapping[str, int]) -> TransformerConfig:
    """The model of a transformer workload: bert's, or GPT-2's for gpt and generate."""
    return transformer_config("bert" if workload == "bert" else "gpt", params)


def build_transformer(
    model: str,
    params: Mapping[str, int],
    weights: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
) -> Graph:
    """bert or gpt at `params` (seq_len: the graph's sequence length; the batch axis is
    symbolic): int64 token ids "input" (batch, seq_len) -> "logits" (batch, seq_len, vocab),
    with canonical `weights` (checked) or weights drawn from `seed`."""
    if model not in TRANSFORMER_NAMES:
        raise ValueError(f"unknown transformer {model!r}; valid: {', '.join(TRANSFORMER_NAMES)}")
    config, seq = transformer_config(model, params), params["seq_len"]
    parameters = Parameters(model, weights, seed)
    b = GraphBuilder(parameters)
    (_bert if model == "bert" else _gpt)(b, INPUT, config, seq)
    parameters.check_all_used()
    shape = (BATCH_AXIS, seq, config.vocab)
    metadata = {"model": model, "weights": "Hugging Face checkpoint names, (out, in) dense"}
    metadata |= {k: str(v) for k, v in params.items()}
    inputs = [tensor_input(INPUT, TensorProto.INT64, (BATCH_AXIS, seq))]
    serialized = b.finish(inputs, OUTPUT, shape, model, metadata)
    token_shape: tuple[int | str, ...] = (BATCH_AXIS, seq)
    return Graph(
        model,
        serialized,
        parameters.used,
        {INPUT: (token_shape, np.int64)},
        OUTPUT,
        shape,
        token_ids_below=config.vocab,
    )


def build_attention(params: Mapping[str, int], batch: int) -> Graph:
    """The attention op: Q and V graph inputs (batch, heads, seq_len, head_dim) and K already
    transposed, (batch, heads, head_dim, seq_len) (ATTENTION_LAYOUT: no mode times a
    transpose), as the torch plugin passes its tensors each step; "y" the context."""
    b = GraphBuilder(Parameters("attention", None))
    heads, seq, head_dim = params["heads"], params["seq_len"], params["head_dim"]
    shape = (batch, heads, seq, head_dim)
    shapes = {"q": shape, "k_t": (batch, heads, head_dim, seq), "v": shape}
    mask = causal_mask(b, seq, seq) if params["causal"] else None
    attend(b, "q", "k_t", "v", "attention", head_dim, mask)
    inputs = [tensor_input(name, TensorProto.FLOAT, dims) for name, dims in shapes.items()]
    metadata = {"op": "attention", "batch": str(batch)} | {k: str(v) for k, v in params.items()}
    serialized = b.finish(inputs, "y", shape, "attention", metadata)
    operands = {name: (dims, np.float32) for name, dims in shapes.items()}
    return Graph("attention", serialized, {}, operands, "y", shape)


def canonical_weights(model: str, seed: int, params: Mapping[str, int]) -> dict[str, np.ndarray]:
    """A freshly initialised bert or gpt at `params` as canonical weights."""
    return dict(build_transformer(model, {**params, "seq_len": 1}, None, seed).weights)


def cell_graph(name: str, params: Mapping[str, int], batch: int, seed: int) -> Graph:
    """The graph of an attention, bert or gpt cell (weights drawn from `seed`)."""
    if name == "attention":
        return build_attention(params, batch)
    return build_transformer(name, params, None, seed)
