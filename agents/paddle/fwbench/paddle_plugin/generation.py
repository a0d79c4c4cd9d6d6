"""The generate workload: greedy decoding with a KV cache on GPT-2 (transformers.py), as the
PyTorch plugin's Generator, in dygraph mode.

The cache holds prompt_len + new_tokens positions per layer, preallocated as Paddle tensors
and written in place (slice assignment, Paddle's set_value kernel); each decode step attends
over the filled part only. Static mode is not offered: a to_static decode step would have to
write into tensors it does not own at a position that changes every step, and Paddle's
program conversion has no in-place update of a captured buffer (TensorFlow's variables,
JAX's donated buffers) to trace once and run at every position."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle

from fwbench.paddle_plugin.attention import sdpa_kernel
from fwbench.paddle_plugin.transformers import (
    GPT2LMHeadModel,
    KVCache,
    build_transformer,
    config_for,
)
from fwbench.runtime.plugin import GenerationSteps

GENERATE_MODES = ("dygraph",)


class Generator:
    """Greedy generation on a GPT2LMHeadModel with a KVCache. `prefill()` starts over with the
    prompt and makes the first token; `decode()` makes each next one; each returns the
    tokens, (batch,) int64. With `keep_gaps`, `tokens` keeps the generation's tokens and
    `gaps` each step's top-1 minus top-2 logit (a near-tie makes greedy decoding
    ill-defined)."""

    def __init__(
        self,
        model: GPT2LMHeadModel,
        prompt: paddle.Tensor,
        cache: KVCache,
        keep_gaps: bool = False,
    ) -> None:
        self.model, self.prompt, self.cache = model.eval(), prompt, cache
        self.keep_gaps = keep_gaps
        self.token = paddle.zeros(prompt.shape[:1], "int64")
        self.filled = 0  # positions of the cache written so far
        self.tokens: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []

    def _choose(self, logits: paddle.Tensor) -> paddle.Tensor:
        self.token = paddle.argmax(logits, axis=-1)
        if self.keep_gaps:
            top = paddle.topk(logits.astype("float32"), k=2, axis=-1)[0].numpy()
            self.gaps.append(top[:, 0] - top[:, 1])
            self.tokens.append(self.token.numpy().astype(np.int64))
        return self.token

    def prefill(self) -> paddle.Tensor:
        self.tokens, self.gaps = [], []
        with paddle.no_grad():
            logits = self.model.prefill(self.prompt, self.cache)
        self.filled = int(self.prompt.shape[1])
        return self._choose(logits)

    def decode(self) -> paddle.Tensor:
        if self.filled >= self.cache.length:
            raise RuntimeError(f"the KV cache holds {self.cache.length} positions, all filled")
        with paddle.no_grad():
            logits = self.model.decode(self.token, self.filled, self.cache)
        self.filled += 1
        return self._choose(logits)


def build_generation(
    params: Mapping[str, int],
    batch: int,
    dtype: str,
    seed: int,
    model: GPT2LMHeadModel | None = None,
    prompt: np.ndarray | None = None,
    keep_gaps: bool = False,
) -> tuple[GenerationSteps, Generator]:
    """The generate workload's parts on a fresh GPT-2 (or `model`), a random prompt (or
    `prompt`, (batch, prompt_len) ids) and a cache preallocated for prompt_len + new_tokens
    positions."""
    config = config_for("generate", params)
    if model is None:
        built = build_transformer(config, seed, dtype)
        assert isinstance(built, GPT2LMHeadModel)
        model = built
    if prompt is None:
        rng = np.random.default_rng(seed + 1)  # the data's own stream, apart from the weights'
        prompt = rng.integers(0, config.vocab, (batch, params["prompt_len"]), dtype=np.int64)
    tokens = paddle.to_tensor(np.asarray(prompt, dtype=np.int64))
    length = int(tokens.shape[1]) + params["new_tokens"]
    cache = KVCache(config, int(tokens.shape[0]), length, dtype)
    run = Generator(model, tokens, cache, keep_gaps)
    return GenerationSteps(run.prefill, run.decode, params["new_tokens"] - 1), run


def kv_cache_settings(run: Generator, dtype: str) -> dict[str, str]:
    batch, _, heads, head_dim = (int(n) for n in run.cache.keys[0].shape)
    query = (batch, 1, heads, head_dim)  # a decode step's
    return {
        "kv_cache": f"preallocated for {run.cache.length} positions (a key and a value tensor "
        "per layer, (batch, positions, heads, head_dim), written in place by slice "
        "assignment); each step attends over the filled part",
        "kv_cache_allocated_bytes": str(run.cache.bytes()),
        "attention_kernel": sdpa_kernel(query, dtype, causal=False),
    }
