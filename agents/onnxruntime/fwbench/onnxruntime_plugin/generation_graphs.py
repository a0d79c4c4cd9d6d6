"""GPT-2's generation as two ONNX graphs around an explicit KV cache (the generate workload):
a prefill graph over the prompt and a decode graph of one token, both built with
transformer_graphs' layers from the same canonical weights.

The cache is the caller's: per layer a key array (batch, heads, head_dim, length), stored
transposed so that a query's scores are one MatMul with no transpose of the cache, and a value
array (batch, heads, length, head_dim), preallocated for prompt_len + new_tokens positions.
The decode graph takes the cache and the new token's position as inputs and never copies
them: the scores of the cached positions (those at and after `position` masked with -inf)
are concatenated with the new key's own score, and the context is the cached values' product
plus the new value times its probability. It returns the new key and value (one position)
for the caller to write into the cache, with the logits and the greedy next token (ArgMax:
the first of equal maxima, as torch.argmax). The prefill graph returns the prompt's keys and
values, the last position's logits and the first new token."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, ValueInfoProto, helper

from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.onnxruntime_plugin.graphs import GraphBuilder, Parameters, tensor_input
from fwbench.onnxruntime_plugin.models import OUTPUT
from fwbench.runtime.architectures import TransformerConfig

TOKENS, TOKEN, POSITION, NEXT_TOKEN = "tokens", "token", "position", "next_token"


def past_key(layer: int) -> str:
    return f"past_key.{layer}"


def past_value(layer: int) -> str:
    return f"past_value.{layer}"


def new_key(layer: int) -> str:
    return f"key.{layer}"


def new_value(layer: int) -> str:
    return f"value.{layer}"


@dataclass(frozen=True)
class CacheShape:
    """The generation's shapes: batch, prompt length and cache length (positions)."""

    config: TransformerConfig
    batch: int
    prompt_len: int
    length: int

    def key(self, positions: int) -> tuple[int, ...]:
        c = self.config
        return (self.batch, c.heads, c.head_dim, positions)

    def value(self, positions: int) -> tuple[int, ...]:
        c = self.config
        return (self.batch, c.heads, positions, c.head_dim)

    def bytes(self) -> int:
        """Keys and values of every layer, float32."""
        return 2 * self.config.layers * int(np.prod(self.key(self.length))) * 4


@dataclass(frozen=True)
class GenerationGraphs:
    shape: CacheShape
    prefill: bytes
    decode: bytes


def _outputs(
    b: GraphBuilder, shape: CacheShape, kept: list[tuple[str, str]], positions: int
) -> list[ValueInfoProto]:
    """The graph outputs after the logits: the next token, then each layer's keys and values
    (Identity nodes give them their names)."""
    outputs = [helper.make_tensor_value_info(NEXT_TOKEN, TensorProto.INT64, [shape.batch, 1])]
    for layer, (key, value) in enumerate(kept):
        for name, source, dims in (
            (new_key(layer), key, shape.key(positions)),
            (new_value(layer), value, shape.value(positions)),
        ):
            b.nodes.append(helper.make_node("Identity", [source], [name], name=name))
            outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims)))
    return outputs


def _finish(
    b: GraphBuilder,
    x: str,
    shape: CacheShape,
    inputs: list[ValueInfoProto],
    kept: list[tuple[str, str]],
    positions: int,
    name: str,
) -> bytes:
    c = shape.config
    logits = tg.gpt_head(b, x, c, OUTPUT)
    b.nodes.append(helper.make_node("ArgMax", [logits], [NEXT_TOKEN], name=NEXT_TOKEN, axis=1))
    more = _outputs(b, shape, kept, positions)
    metadata = {"model": "gpt", "graph": name, "cache_length": str(shape.length)}
    return b.finish(inputs, OUTPUT, (shape.batch, c.vocab), f"gpt.{name}", metadata, more)


def _prefill(shape: CacheShape, weights: Mapping[str, np.ndarray] | None, seed: int) -> bytes:
    c, prompt = shape.config, shape.prompt_len
    parameters = Parameters("gpt", weights, seed)
    b = GraphBuilder(parameters)
    positions = tg.int64_constant(b, f"positions.{prompt}", np.arange(prompt))
    x = tg.gpt_embed(b, c, TOKENS, positions)
    kept: list[tuple[str, str]] = []
    attn = tg.self_attention(b, c, prompt, kept)
    for i in range(c.layers):
        x = tg.gpt_block(b, x, f"transformer.h.{i}", c, attn)
    # The last position of each sequence: (batch, prompt, hidden)[:, -1].
    x = tg.reshape(b, x, (-1, prompt, c.hidden), "transformer.sequences")
    x = b.node("Gather", [x, tg.int64_constant(b, "last", prompt - 1)], "transformer.last", axis=1)
    inputs = [tensor_input(TOKENS, TensorProto.INT64, (shape.batch, prompt))]
    serialized = _finish(b, x, shape, inputs, kept, prompt, "prefill")
    parameters.check_all_used()
    return serialized


def _decode_attention(b: GraphBuilder, shape: CacheShape, kept: list[tuple[str, str]]) -> tg.Attend:
    c, length = shape.config, shape.length
    cached = b.node(
        "Less", [tg.int64_constant(b, "cache_positions", np.arange(length)), POSITION], "cached"
    )
    zero, minus_inf = (
        b.constant(n, np.array(v, np.float32)) for n, v in (("0", 0.0), ("-inf", -np.inf))
    )
    mask = b.node("Where", [cached, zero, minus_inf], "cache_mask")
    mask = b.node("Concat", [mask, b.constant("own", np.zeros(1, np.float32))], "mask", axis=0)
    split = tg.int64_constant(b, "split.cache", [length, 1])

    def run(q: str, k: str, v: str, path: str) -> str:
        layer = len(kept)
        qh = tg.split_heads(b, q, f"{path}.q", c, 1)
        kt = tg.split_heads(b, k, f"{path}.k", c, 1, keys=True)
        vh = tg.split_heads(b, v, f"{path}.v", c, 1)
        kept.append((kt, vh))
        scores = b.node("MatMul", [qh, past_key(layer)], f"{path}.cached_scores")
        own = b.node("MatMul", [qh, kt], f"{path}.own_score")
        scores = b.node("Concat", [scores, own], f"{path}.scores", axis=-1)
        scale = b.constant(f"attention.scale.{c.head_dim}", np.array(c.head_dim**-0.5, np.float32))
        scores = b.node(
            "Add", [b.node("Mul", [scores, scale], f"{path}.scaled"), mask], f"{path}.masked"
        )
        probs = b.node("Softmax", [scores], f"{path}.softmax", axis=-1)
        p_cache, p_own = b.node_outputs(
            "Split", [probs, split], [f"{path}.p_cache", f"{path}.p_own"], axis=-1
        )
        context = b.node(
            "Add",
            [
                b.node("MatMul", [p_cache, past_value(layer)], f"{path}.cached_context"),
                b.node("Mul", [p_own, vh], f"{path}.own_context"),
            ],
            f"{path}.context",
        )
        return tg.merge_heads(b, context, path, c)

    return run


def _decode(shape: CacheShape, weights: Mapping[str, np.ndarray] | None, seed: int) -> bytes:
    c = shape.config
    parameters = Parameters("gpt", weights, seed)
    b = GraphBuilder(parameters)
    x = tg.gpt_embed(b, c, TOKEN, POSITION)  # (batch, 1, hidden) + (1, hidden)
    kept: list[tuple[str, str]] = []
    attn = _decode_attention(b, shape, kept)
    for i in range(c.layers):
        x = tg.gpt_block(b, x, f"transformer.h.{i}", c, attn)
    inputs = [
        tensor_input(TOKEN, TensorProto.INT64, (shape.batch, 1)),
        tensor_input(POSITION, TensorProto.INT64, (1,)),
    ]
    for layer in range(c.layers):
        inputs.append(tensor_input(past_key(layer), TensorProto.FLOAT, shape.key(shape.length)))
        inputs.append(tensor_input(past_value(layer), TensorProto.FLOAT, shape.value(shape.length)))
    serialized = _finish(b, x, shape, inputs, kept, 1, "decode")
    parameters.check_all_used()
    return serialized


def build_generation_graphs(
    params: Mapping[str, int],
    batch: int,
    prompt_len: int,
    weights: Mapping[str, np.ndarray] | None = None,
    seed: int = 0,
) -> GenerationGraphs:
    """The prefill and decode graphs of GPT-2 at `params` for `batch` sequences of
    `prompt_len` tokens and a cache of prompt_len + new_tokens positions."""
    config = tg.config_for("generate", params)
    if weights is None:  # drawn once: both graphs hold the same weights
        weights = tg.canonical_weights("gpt", seed, params)
    shape = CacheShape(config, batch, prompt_len, prompt_len + params["new_tokens"])
    return GenerationGraphs(shape, _prefill(shape, weights, seed), _decode(shape, weights, seed))
