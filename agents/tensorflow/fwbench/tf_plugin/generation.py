"""The generate workload: greedy decoding with a KV cache on GPT-2 (transformers.py), as the
PyTorch plugin's Generator.

The cache holds prompt_len + new_tokens positions per layer, preallocated as tf.Variables.
Traced ("function", "xla"), prefill and decode are one tf.function each, traced once: the
position and the last token live in variables that the step itself reads and advances, each
step scatters its key and value into the cache in place and attends over the whole cache with
the positions after its own masked (static shapes, as Hugging Face's static cache; the price
is reading the whole cache every step). Eager, a step attends over the filled part only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import tensorflow as tf

from fwbench.runtime.plugin import GenerationSteps
from fwbench.tf_plugin.training import MODES, compile_fn
from fwbench.tf_plugin.transformer_layers import ATTENTION_KERNEL
from fwbench.tf_plugin.transformers import (
    GPT2LMHeadModel,
    KVCache,
    build_transformer,
    config_for,
)

# Every mode of the models: the traced decode step has static shapes, so XLA compiles it once.
GENERATE_MODES = MODES


class Generator:
    """Greedy generation on a GPT2LMHeadModel with a KVCache. `prefill()` starts over with the
    prompt and makes the first token; `decode()` makes each next one; each returns the
    tokens, (batch,) int64. With `keep_gaps`, `tokens` keeps the generation's tokens and
    `gaps` each step's top-1 minus top-2 logit (a near-tie makes greedy decoding
    ill-defined)."""

    def __init__(
        self,
        model: GPT2LMHeadModel,
        prompt: tf.Tensor,
        cache: KVCache,
        mode: str,
        keep_gaps: bool = False,
    ) -> None:
        self.model, self.prompt, self.cache = model, prompt, cache
        self.static = mode != "eager"
        self.keep_gaps = keep_gaps
        self.token = tf.Variable(tf.zeros(prompt.shape[:1], tf.int64), trainable=False)
        # int64, not int32: TensorFlow keeps int32 tensors of a GPU op in host memory.
        self.position = tf.Variable(0, dtype=tf.int64, trainable=False)
        self.filled = 0  # positions of the cache written so far (the eager step slices them)
        self.tokens: list[tf.Tensor] = []
        self.gaps: list[tf.Tensor] = []
        self._prefill = compile_fn(self._prefill_step, mode)
        self._decode = compile_fn(self._decode_step, mode) if self.static else self._decode_step

    def _choose(self, logits: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        token = tf.argmax(logits, axis=-1, output_type=tf.int64)
        self.token.assign(token)
        return logits, token

    def _prefill_step(self, prompt: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        logits = self.model.prefill(prompt, self.cache)
        self.position.assign(int(prompt.shape[1]))
        return self._choose(logits)

    def _decode_step(self, filled: int | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        position = self.position.read_value()
        logits = self.model.decode(self.token.read_value(), position, self.cache, filled)
        self.position.assign(position + 1)
        return self._choose(logits)

    def _keep(self, output: tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        logits, token = output
        if self.keep_gaps:
            top = tf.math.top_k(tf.cast(logits, tf.float32), k=2).values
            self.gaps.append(top[:, 0] - top[:, 1])
            self.tokens.append(token)
        return token

    def prefill(self) -> tf.Tensor:
        self.tokens, self.gaps = [], []
        self.filled = int(self.prompt.shape[1])
        return self._keep(self._prefill(self.prompt))

    def decode(self) -> tf.Tensor:
        if self.filled >= self.cache.length:
            raise RuntimeError(f"the KV cache holds {self.cache.length} positions, all filled")
        self.filled += 1
        return self._keep(self._decode() if self.static else self._decode(self.filled))


def build_generation(
    params: Mapping[str, int],
    batch: int,
    dtype: tf.DType,
    seed: int,
    device: str,
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
        built = build_transformer(config, dtype=dtype, seed=seed, device=device)
        assert isinstance(built, GPT2LMHeadModel)
        model = built
    with tf.device(device):
        if prompt is None:
            rng = tf.random.Generator.from_seed(seed)
            tokens = rng.uniform((batch, params["prompt_len"]), 0, config.vocab, dtype=tf.int64)
        else:
            tokens = tf.constant(prompt, dtype=tf.int64)
        length = int(tokens.shape[1]) + params["new_tokens"]
        cache = KVCache(config, int(tokens.shape[0]), length, model.store.dtype)
        run = Generator(model, tokens, cache, mode, keep_gaps)
    return GenerationSteps(run.prefill, run.decode, params["new_tokens"] - 1), run


def kv_cache_settings(run: Generator) -> dict[str, str]:
    how = (
        "each step attends over the whole cache, the unfilled part masked (static shapes: "
        "one traced decode step)"
        if run.static
        else "each step attends over the filled part"
    )
    return {
        "kv_cache": f"preallocated for {run.cache.length} positions (a key and a value "
        f"tf.Variable per layer, written in place by scatter); {how}",
        "kv_cache_allocated_bytes": str(run.cache.bytes()),
        "attention_kernel": ATTENTION_KERNEL,
    }
