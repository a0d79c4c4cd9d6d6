"""Greedy generation around generation_graphs' prefill and decode graphs, on NumPy buffers
that the runtime running the graphs shares (ONNX Runtime's IO binding over their memory,
OpenVINO's shared-memory tensors): framework-free, so both plugins use it.

Every buffer is allocated once, at build: the prompt, the token and position fed to the
decode graph, each graph's outputs, and the cache (generation_graphs.CacheShape's layouts),
preallocated for prompt_len + new_tokens positions. A graph run reads its inputs and writes
its outputs in place; between runs the loop copies what the graphs returned into the cache
in NumPy: after the prefill the prompt's keys and values, after each decode step the one new
position's key and value (batch x hidden floats a layer), never the cache as a whole."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from fwbench.onnxruntime_plugin import generation_graphs as gg
from fwbench.onnxruntime_plugin.models import OUTPUT
from fwbench.runtime import architectures as arch
from fwbench.runtime.plugin import GenerationSteps

Run = Callable[[], object]  # one graph run on the shared buffers


def _outputs(shape: gg.CacheShape, positions: int) -> dict[str, np.ndarray]:
    c = shape.config
    outputs: dict[str, np.ndarray] = {
        OUTPUT: np.zeros((shape.batch, c.vocab), np.float32),
        gg.NEXT_TOKEN: np.zeros((shape.batch, 1), np.int64),
    }
    for layer in range(c.layers):
        outputs[gg.new_key(layer)] = np.zeros(shape.key(positions), np.float32)
        outputs[gg.new_value(layer)] = np.zeros(shape.value(positions), np.float32)
    return outputs


def random_prompt(params: Mapping[str, int], batch: int, seed: int) -> np.ndarray:
    """A generate cell's prompt: (batch, prompt_len) token ids drawn from `seed`."""
    config = arch.transformer_config("gpt", params)
    rng = np.random.default_rng([seed, 1])
    return rng.integers(0, config.vocab, (batch, params["prompt_len"]), dtype=np.int64)


class GreedyBuffers:
    """The generation's buffers: `prefill_inputs`/`prefill_outputs` and `decode_inputs`/
    `decode_outputs` by graph name, the cache among the decode inputs. With `keep_gaps`,
    `tokens` keeps the tokens chosen and `gaps` each step's top-1 minus top-2 logit."""

    def __init__(self, shape: gg.CacheShape, prompt: np.ndarray, keep_gaps: bool = False):
        self.shape = shape
        self.keep_gaps = keep_gaps
        self.prefill_inputs = {gg.TOKENS: np.ascontiguousarray(prompt, np.int64)}
        self.prefill_outputs = _outputs(shape, shape.prompt_len)
        self.token = np.zeros((shape.batch, 1), np.int64)
        self.position = np.zeros(1, np.int64)
        self.decode_inputs: dict[str, np.ndarray] = {
            gg.TOKEN: self.token,
            gg.POSITION: self.position,
        }
        for layer in range(shape.config.layers):
            self.decode_inputs[gg.past_key(layer)] = np.zeros(shape.key(shape.length), np.float32)
            self.decode_inputs[gg.past_value(layer)] = np.zeros(
                shape.value(shape.length), np.float32
            )
        self.decode_outputs = _outputs(shape, 1)
        self.tokens: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []

    def after_prefill(self) -> np.ndarray:
        """The prompt's keys and values into the cache's first positions; the next token in."""
        self.tokens, self.gaps = [], []
        prompt = self.shape.prompt_len
        for layer in range(self.shape.config.layers):
            out, cache = self.prefill_outputs, self.decode_inputs
            cache[gg.past_key(layer)][..., :prompt] = out[gg.new_key(layer)]
            cache[gg.past_value(layer)][:, :, :prompt] = out[gg.new_value(layer)]
        self.position[0] = prompt
        return self._choose(self.prefill_outputs)

    def after_decode(self) -> np.ndarray:
        """The new position's key and value into the cache; the next token in."""
        at = int(self.position[0])
        if at >= self.shape.length:
            raise RuntimeError(f"the KV cache holds {self.shape.length} positions, all filled")
        for layer in range(self.shape.config.layers):
            out, cache = self.decode_outputs, self.decode_inputs
            cache[gg.past_key(layer)][..., at] = out[gg.new_key(layer)][..., 0]
            cache[gg.past_value(layer)][:, :, at] = out[gg.new_value(layer)][:, :, 0]
        self.position[0] = at + 1
        return self._choose(self.decode_outputs)

    def _choose(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        self.token[...] = outputs[gg.NEXT_TOKEN]
        if self.keep_gaps:
            top = np.sort(outputs[OUTPUT], axis=-1)[:, -2:]
            self.gaps.append(top[:, 1] - top[:, 0])
            self.tokens.append(self.token[:, 0].copy())
        return self.token

    def allocated_bytes(self) -> int:
        return self.shape.bytes()


def generation_steps(
    buffers: GreedyBuffers, prefill: Run, decode: Run, new_tokens: int
) -> GenerationSteps:
    """The runtime's parts: `prefill` then the cache filled; `decode` then its entry written."""

    def prefill_step() -> np.ndarray:
        prefill()
        return buffers.after_prefill()

    def decode_step() -> np.ndarray:
        decode()
        return buffers.after_decode()

    return GenerationSteps(prefill_step, decode_step, new_tokens - 1)


def generated(buffers: GreedyBuffers) -> tuple[np.ndarray, np.ndarray]:
    """The tokens (batch, steps) int64 and gaps (batch, steps) float32 of the last generation."""
    return np.stack(buffers.tokens, axis=1), np.stack(buffers.gaps, axis=1).astype(np.float32)


def kv_cache_settings(buffers: GreedyBuffers, how: str) -> dict[str, str]:
    """settings.kv_cache and kv_cache_allocated_bytes; `how` says how the runtime shares the
    buffers."""
    shape = buffers.shape
    return {
        "kv_cache": (
            f"explicit, preallocated for {shape.length} positions (keys stored transposed); "
            "a prefill and a decode graph, each compiled once; a decode step reads the whole "
            "cache as a graph input, the unfilled part masked, and returns the new position's "
            "key and value, which NumPy writes into the cache (one position per layer is "
            f"copied each step, never the cache); {how}"
        ),
        "kv_cache_allocated_bytes": str(buffers.allocated_bytes()),
    }
