"""The generate workload: greedy decoding with a KV cache on GPT-2 (transformers.py), as the
PyTorch plugin's Generator.

The cache holds prompt_len + new_tokens positions per layer, preallocated as the buffers of a
KVCache Layer and written in place (slice assignment, Paddle's set_value kernel). In
"dygraph" each decode step attends over the filled part only. In "static" the prefill and
the decode step are one ``paddle.jit.to_static`` program each, converted once: the position
is a 0-d tensor input, each step writes its key and value into the cache buffers at it and
attends over the whole cache with the positions after its own masked (static shapes, as
Hugging Face's static cache; the price is reading the whole cache every step)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle
from paddle import nn

from fwbench.paddle_plugin.attention import sdpa_kernel
from fwbench.paddle_plugin.training import MODES, compile_layer
from fwbench.paddle_plugin.transformers import (
    GPT2LMHeadModel,
    KVCache,
    build_transformer,
    config_for,
)
from fwbench.runtime.plugin import GenerationSteps

GENERATE_MODES = MODES


class _Prefill(nn.Layer):
    """The prompt's pass (filling the cache) and its token, as the Layer static mode converts:
    the model and the cache are its sublayers, so their tensors are the program's own."""

    def __init__(self, model: GPT2LMHeadModel, cache: KVCache) -> None:
        super().__init__()
        self.model, self.cache = model, cache

    def forward(self, prompt: paddle.Tensor) -> tuple[paddle.Tensor, paddle.Tensor]:
        logits = self.model.prefill(prompt, self.cache)
        return logits, paddle.argmax(logits, axis=-1)


class _Decode(_Prefill):
    def forward(  # type: ignore[override]  # a step takes its token and position
        self, token: paddle.Tensor, position: paddle.Tensor
    ) -> tuple[paddle.Tensor, paddle.Tensor]:
        logits = self.model.decode_static(token, position, self.cache)
        return logits, paddle.argmax(logits, axis=-1)


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
        mode: str,
        keep_gaps: bool = False,
    ) -> None:
        self.model, self.prompt, self.cache = model.eval(), prompt, cache
        self.static = mode == "static"
        self.keep_gaps = keep_gaps
        self.token = paddle.zeros(prompt.shape[:1], "int64")
        self.filled = 0  # positions of the cache written so far
        self.tokens: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []
        self._prefill = compile_layer(_Prefill(model, cache), mode)
        self._decode = compile_layer(_Decode(model, cache), mode)
        # The static step's position inputs, made here rather than in the timed steps.
        self._positions = [paddle.to_tensor(p, "int64") for p in range(cache.length)]

    def _keep(self, logits: paddle.Tensor, token: paddle.Tensor) -> paddle.Tensor:
        self.token = token
        if self.keep_gaps:
            top = paddle.topk(logits.astype("float32"), k=2, axis=-1)[0].numpy()
            self.gaps.append(top[:, 0] - top[:, 1])
            self.tokens.append(token.numpy().astype(np.int64))
        return token

    def prefill(self) -> paddle.Tensor:
        self.tokens, self.gaps = [], []
        with paddle.no_grad():
            logits, token = self._prefill(self.prompt)
        self.filled = int(self.prompt.shape[1])
        return self._keep(logits, token)

    def decode(self) -> paddle.Tensor:
        if self.filled >= self.cache.length:
            raise RuntimeError(f"the KV cache holds {self.cache.length} positions, all filled")
        with paddle.no_grad():
            if self.static:
                logits, token = self._decode(self.token, self._positions[self.filled])
            else:
                logits = self.model.decode(self.token, self.filled, self.cache)
                token = paddle.argmax(logits, axis=-1)
        self.filled += 1
        return self._keep(logits, token)


def build_generation(
    params: Mapping[str, int],
    batch: int,
    dtype: str,
    seed: int,
    mode: str,
    model: GPT2LMHeadModel | None = None,
    prompt: np.ndarray | None = None,
    keep_gaps: bool = False,
) -> tuple[GenerationSteps, Generator]:
    """The generate workload's parts on a fresh GPT-2 (or `model`), a random prompt (or
    `prompt`, (batch, prompt_len) ids) and a cache preallocated for prompt_len + new_tokens
    positions."""
    if mode not in GENERATE_MODES:
        raise ValueError(f"unknown mode {mode!r}; valid: {', '.join(GENERATE_MODES)}")
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
    run = Generator(model, tokens, cache, mode, keep_gaps)
    return GenerationSteps(run.prefill, run.decode, params["new_tokens"] - 1), run


def kv_cache_settings(run: Generator, dtype: str) -> dict[str, str]:
    batch, _, heads, head_dim = (int(n) for n in run.cache.keys(0).shape)
    query = (batch, 1, heads, head_dim)  # a decode step's
    how = (
        "each step attends over the whole cache, the unfilled part masked (static shapes: "
        "one to_static decode program)"
        if run.static
        else "each step attends over the filled part"
    )
    return {
        "kv_cache": f"preallocated for {run.cache.length} positions (a key and a value buffer "
        "per layer, (batch, positions, heads, head_dim), written in place by slice "
        f"assignment); {how}",
        "kv_cache_allocated_bytes": str(run.cache.bytes()),
        "attention_kernel": sdpa_kernel(query, dtype, causal=False),
    }
