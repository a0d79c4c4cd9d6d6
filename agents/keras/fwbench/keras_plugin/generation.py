"""The generate workload: greedy decoding with a KV cache on GPT-2 (transformers.py), as the
PyTorch plugin's Generator, in Keras ops on every backend.

The cache holds prompt_len + new_tokens positions per layer, preallocated, and travels as
state: the last token, its position and the cache go into each step and come back out, each
step writing its key and value with keras.ops.slice_update, which returns a new tensor: only
XLA with the buffer donated (jax "jit") writes in place; torch's slice_update clones the layer's
cache and TensorFlow's XlaDynamicUpdateSlice writes a new one, a copy of the cache each step
(small beside the weights every step reads: 19 MB against 500 MB for GPT-2 small at 256
positions). How a step runs is the backend's:

- jax, "jit": prefill and decode are jax.jit functions, stateless (the weights passed in under
  a keras.StatelessScope), the cache donated, so that XLA updates it in place; traced once,
  each decode step attends over the whole cache with the positions after its own masked;
- tensorflow, "function" or "xla": one tf.function each (jit_compile for "xla"), the same
  static-shape step, traced once (the position a tensor);
- torch, "compile": torch.compile of each, the same static-shape step, compiled once;
- eager (torch's and tensorflow's "eager"): each step runs op by op under the backend's
  no-autograd scope and attends over the filled part of the cache only;
- jax, "eager": op by op too, but over the whole cache masked, as jit's: JAX compiles each
  primitive for each new shape, so a slice growing by one every step made the first
  generation of 128 tokens at hidden 128 take 176 s (a compilation per op and position)
  against 2.6 s of steps once compiled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import keras
import numpy as np

from fwbench.keras_plugin import training
from fwbench.keras_plugin.attention import fused_kernel
from fwbench.keras_plugin.backend import Backend
from fwbench.keras_plugin.transformers import Cache, GPT2LMHeadModel, build_transformer, config_for
from fwbench.runtime.plugin import GenerationSteps

Step = Callable[..., tuple[Any, Any, Any, Cache]]  # -> logits, token, position, cache


def _choose(logits: Any, position: Any, cache: Cache) -> tuple[Any, Any, Any, Cache]:
    token = keras.ops.cast(keras.ops.argmax(logits, axis=-1), "int32")
    return logits, token, position, cache


def _compile(mode: str, model: GPT2LMHeadModel, function: Step, cache_argument: int) -> Step:
    """`function(*args)` as the mode runs it; under jax.jit the weights become arguments
    and the cache, argument `cache_argument`, is donated."""
    if mode == "jit":
        import jax

        variables = [*model.trainable_variables, *model.non_trainable_variables]

        def stateless(values: list[Any], *args: Any) -> tuple[Any, Any, Any, Cache]:
            with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))):
                return function(*args)

        jitted = jax.jit(stateless, donate_argnums=(cache_argument + 1,))
        return lambda *args: jitted([v.value for v in variables], *args)
    if mode == "compile":
        import torch

        return torch.compile(function)  # type: ignore[no-any-return]
    if mode in ("function", "xla"):
        import tensorflow as tf

        return tf.function(function, jit_compile=mode == "xla", autograph=False)  # type: ignore[no-any-return]
    return function


class Generator:
    """Greedy generation on a GPT2LMHeadModel. `prefill()` starts over with the prompt and
    makes the first token; `decode()` makes each next one; each returns the tokens, (batch,)
    int32. With `keep_gaps`, `tokens` keeps the generation's tokens and `gaps` each step's
    top-1 minus top-2 logit (a near-tie makes greedy decoding ill-defined)."""

    def __init__(
        self,
        model: GPT2LMHeadModel,
        prompt: Any,
        length: int,
        backend: Backend,
        mode: str,
        keep_gaps: bool = False,
    ) -> None:
        self.model, self.prompt, self.length = model, prompt, length
        self.backend = backend
        # The decode step's shapes: static (the whole cache, masked) or the filled part.
        self.static = mode != "eager" or backend.name == "jax"
        self.keep_gaps = keep_gaps
        self.batch, self.prompt_len = (int(n) for n in prompt.shape)
        self.cache: Cache = []
        self.token: Any = None
        self.position: Any = None
        self.filled = 0
        self.tokens: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []

        def prefill(prompt: Any, cache: Cache) -> tuple[Any, Any, Any, Cache]:
            logits, cache = model.prefill(prompt, cache)
            return _choose(logits, keras.ops.convert_to_tensor(self.prompt_len, "int32"), cache)

        def decode(token: Any, position: Any, cache: Cache) -> tuple[Any, Any, Any, Cache]:
            logits, cache = model.decode(token, position, cache)
            return _choose(logits, position + 1, cache)

        self._prefill = _compile(mode, model, prefill, cache_argument=1)
        self._decode = _compile(mode, model, decode, cache_argument=2)

    def cache_bytes(self) -> int:
        c = self.model.config
        return 2 * c.layers * self.batch * self.length * c.hidden * 4  # float32

    def _keep(self, logits: Any, token: Any) -> Any:
        if self.keep_gaps:
            top = np.sort(keras.ops.convert_to_numpy(logits).astype(np.float32), axis=-1)
            self.gaps.append(top[:, -1] - top[:, -2])
            self.tokens.append(keras.ops.convert_to_numpy(token))
        return token

    def prefill(self) -> Any:
        self.tokens, self.gaps = [], []
        self.filled = self.prompt_len
        with self.backend.inference():
            empty = self.model.empty_cache(self.batch, self.length)
            logits, self.token, self.position, self.cache = self._prefill(self.prompt, empty)
        return self._keep(logits, self.token)

    def decode(self) -> Any:
        if self.filled >= self.length:
            raise RuntimeError(f"the KV cache holds {self.length} positions, all filled")
        self.filled += 1
        with self.backend.inference():
            if self.static:
                step = self._decode(self.token, self.position, self.cache)
            else:
                logits, cache = self.model.decode(
                    self.token, self.position, self.cache, self.filled
                )
                step = _choose(logits, self.position + 1, cache)
        logits, self.token, self.position, self.cache = step
        return self._keep(logits, self.token)


def build_generation(
    params: Mapping[str, int],
    batch: int,
    seed: int,
    backend: Backend,
    mode: str,
    model: GPT2LMHeadModel | None = None,
    prompt: np.ndarray | None = None,
    keep_gaps: bool = False,
) -> tuple[GenerationSteps, Generator]:
    """The generate workload's parts on a fresh GPT-2 (or `model`), a random prompt (or
    `prompt`, (batch, prompt_len) ids) and a cache for prompt_len + new_tokens positions."""
    if mode not in training.modes(backend.name):  # the models' modes, the default first
        valid = ", ".join(training.modes(backend.name))
        raise ValueError(f"generate has no mode {mode!r} on {backend.name}; valid: {valid}")
    config = config_for("generate", params)
    if model is None:
        keras.utils.set_random_seed(seed)
        built = build_transformer(config).model
        assert isinstance(built, GPT2LMHeadModel)
        model = built
    if prompt is None:
        rng = np.random.default_rng(seed)
        prompt = rng.integers(0, config.vocab, (batch, params["prompt_len"]))
    tokens = keras.ops.convert_to_tensor(np.asarray(prompt, dtype=np.int32))
    length = int(tokens.shape[1]) + params["new_tokens"]
    run = Generator(model, tokens, length, backend, mode, keep_gaps)
    return GenerationSteps(run.prefill, run.decode, params["new_tokens"] - 1), run


def kv_cache_settings(run: Generator) -> dict[str, str]:
    how = (
        "each step attends over the whole cache, the unfilled part masked (static shapes: "
        "one compiled decode step, or in JAX's eager mode one compilation of each op)"
        if run.static
        else "each step attends over the filled part"
    )
    return {
        "kv_cache": f"preallocated for {run.length} positions (a key and a value tensor per "
        f"layer, passed into each step and back, written by keras.ops.slice_update: in place "
        f"where jax.jit donates it, else a copy a step); {how}",
        "kv_cache_allocated_bytes": str(run.cache_bytes()),
        "attention_kernel": fused_kernel(run.backend),
    }
