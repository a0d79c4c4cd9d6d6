"""Greedy generation on GPT-2 with a KV cache: the `generate` workload, and the generation of
the equivalence check (the same code).

The cache holds every layer's keys and values, (batch, positions, heads, head_dim) each,
preallocated for the prompt and the new tokens. Prefill is one jitted program for the prompt's
shape: the forward pass over the prompt, which writes the prompt's keys and values into the
start of the cache, the logits of the last position only, and their argmax. A decode step is
one jitted program too, compiled once: the previous token at a traced position, its key and
value written into the cache with lax.dynamic_update_slice, attention over the WHOLE cache
with the positions after the current one masked, so that every step has the same shapes (the
price: each step reads the whole cache, as the compiled torch path and Hugging Face's static
cache). The cache buffers are donated to every call, so XLA updates them in place, and the
position stays on the device (each step returns the next one): a generation never waits on
the host between its steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from jax import Array, lax

from fwbench.jax_plugin.attention import XLA, Attention
from fwbench.jax_plugin.transformers import Transformer
from fwbench.runtime.plugin import GenerationSteps

# (keys, values): one (batch, positions, heads, head_dim) array per layer each.
KVCache = tuple[tuple[Array, ...], tuple[Array, ...]]
STATIC = "each step attends over the whole cache, the unfilled part masked (static shapes)"


def empty_cache(model: Transformer, batch: int, length: int, dtype: jnp.dtype) -> KVCache:
    config = model.config
    shape = (batch, length, config.heads, config.head_dim)

    def zeros() -> tuple[Array, ...]:
        return tuple(jnp.zeros(shape, dtype) for _ in range(config.layers))

    return zeros(), zeros()


def cache_bytes(cache: KVCache) -> int:
    return sum(a.size * a.dtype.itemsize for part in cache for a in part)


def _choice(logits: Array, keep_gaps: bool) -> tuple[Array, Array | None]:
    """The greedy token (batch,) and, with `keep_gaps`, the top-1 minus top-2 logit."""
    token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
    if not keep_gaps:
        return token, None
    top = lax.top_k(logits.astype(jnp.float32), 2)[0]
    return token, top[:, 0] - top[:, 1]


@dataclass(eq=False)  # hashed by identity: jax.jit caches on the bound methods
class Generator:
    """Greedy generation from `prompt` ((batch, prompt_len) int32) with `params`, on a cache of
    `length` positions. `prefill()` starts over with the prompt and makes the first token;
    `decode()` makes each next one; each returns that token (what `synchronize` waits on).
    With `keep_gaps`, `tokens` and `gaps` keep every step's token and top1-top2 logit gap."""

    model: Transformer
    params: Mapping[str, Array]
    prompt: Array
    length: int
    prefill_attention: Attention = XLA
    decode_attention: Attention = XLA
    keep_gaps: bool = False
    tokens: list[Array] = field(default_factory=list)
    gaps: list[Array] = field(default_factory=list)

    def __post_init__(self) -> None:
        dtype = next(iter(self.params.values())).dtype
        self.cache = empty_cache(self.model, self.prompt.shape[0], self.length, dtype)
        self._prefill = jax.jit(self._prefill_fn, donate_argnums=(2,))
        self._decode = jax.jit(self._decode_fn, donate_argnums=(3,))
        self._token = self.prompt[:, -1]
        self._position = jnp.asarray(self.prompt.shape[1], jnp.int32)
        jax.block_until_ready((self.cache, self._token, self._position))

    def _prefill_fn(
        self, params: Mapping[str, Array], prompt: Array, cache: KVCache
    ) -> tuple[Array, Array | None, Array, KVCache]:
        keys, values = list(cache[0]), list(cache[1])

        def attend(layer: int, q: Array, k: Array, v: Array) -> Array:
            keys[layer] = lax.dynamic_update_slice(keys[layer], k, (0, 0, 0, 0))
            values[layer] = lax.dynamic_update_slice(values[layer], v, (0, 0, 0, 0))
            return self.prefill_attention(q, k, v, causal=True)

        logits = self.model.gpt(params, prompt, attend, 0)
        token, gap = _choice(logits, self.keep_gaps)
        position = jnp.asarray(prompt.shape[1], jnp.int32)
        return token, gap, position, (tuple(keys), tuple(values))

    def _decode_fn(
        self, params: Mapping[str, Array], token: Array, position: Array, cache: KVCache
    ) -> tuple[Array, Array | None, Array, KVCache]:
        keys, values = list(cache[0]), list(cache[1])
        # The positions up to and including this one: (1, 1, 1, length) over (b, n, q, k).
        seen = (jnp.arange(self.length) <= position).reshape(1, 1, 1, -1)

        def attend(layer: int, q: Array, k: Array, v: Array) -> Array:
            at = (0, position, 0, 0)
            keys[layer] = lax.dynamic_update_slice(keys[layer], k, at)
            values[layer] = lax.dynamic_update_slice(values[layer], v, at)
            return self.decode_attention(q, keys[layer], values[layer], mask=seen)

        logits = self.model.gpt(params, token[:, None], attend, position)
        token, gap = _choice(logits, self.keep_gaps)
        return token, gap, position + 1, (tuple(keys), tuple(values))

    def _keep(self, token: Array, gap: Array | None) -> Array:
        self._token = token
        if self.keep_gaps:
            self.tokens.append(token)
            self.gaps.append(gap)  # type: ignore[arg-type]
        return token

    def prefill(self) -> Array:
        self.tokens, self.gaps = [], []
        token, gap, self._position, self.cache = self._prefill(self.params, self.prompt, self.cache)
        return self._keep(token, gap)

    def decode(self) -> Array:
        token, gap, self._position, self.cache = self._decode(
            self.params, self._token, self._position, self.cache
        )
        return self._keep(token, gap)

    def steps(self, new_tokens: int) -> GenerationSteps:
        """The workload's parts: a generation of `new_tokens` is a prefill and new_tokens - 1
        decode steps."""
        return GenerationSteps(self.prefill, self.decode, new_tokens - 1)

    def compilations(self) -> tuple[int, int]:
        """How many programs prefill and decode have compiled (one each, whatever the steps)."""
        return self._prefill._cache_size(), self._decode._cache_size()  # type: ignore[attr-defined]

    def settings(self) -> dict[str, str]:
        kernels = {self.prefill_attention.kernel, self.decode_attention.kernel}
        kernel = (
            kernels.pop()
            if len(kernels) == 1
            else f"prefill: {self.prefill_attention.kernel}; decode: {self.decode_attention.kernel}"
        )
        return {
            "kv_cache": f"preallocated for {self.length} positions; {STATIC}",
            "kv_cache_allocated_bytes": str(cache_bytes(self.cache)),
            "kv_cache_layout": "keys and values per layer, (batch, positions, heads, head_dim)",
            "kv_cache_update": "lax.dynamic_update_slice at a traced position; cache donated",
            "compiled": "prefill and decode step: one XLA program each, each compiled once",
            "attention_kernel": kernel,
        }
