"""The generate workload on ONNX Runtime: greedy_loop's buffers bound to two sessions (the
prefill and decode graphs of generation_graphs), each created once at build.

Each session's IO binding binds every input and output to the buffers' own memory
(bind_input / bind_output with their addresses), once: a run reads the cache where NumPy
keeps it and writes its outputs where the loop reads them, so neither the cache nor the
logits pass through a copy per step (the loop's one-position writes aside). That needs the
buffers in host memory: the CPU execution provider only (the plugin refuses the workload on
CUDA)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnxruntime as ort

from fwbench.onnxruntime_plugin import generation_graphs as gg
from fwbench.onnxruntime_plugin import greedy_loop, session
from fwbench.onnxruntime_plugin.session import Device
from fwbench.onnxruntime_plugin.transformer_graphs import ATTENTION_KERNEL
from fwbench.runtime.plugin import GenerationSteps

CUDA_REASON = (
    "generate on the CUDA provider: the plugin's KV cache lives in host buffers bound by "
    "address (its per-step writes are NumPy's), so on a GPU every step would copy it"
)
BINDING = (
    "ONNX Runtime IO binding: every input and output bound once to host buffers by address "
    "(nothing copied in or out per step)"
)


def _bind(
    sess: ort.InferenceSession, inputs: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]
) -> ort.IOBinding:
    binding = sess.io_binding()
    for name, array in inputs.items():
        binding.bind_input(name, "cpu", 0, array.dtype.type, list(array.shape), array.ctypes.data)
    for name, array in outputs.items():
        binding.bind_output(name, "cpu", 0, array.dtype.type, list(array.shape), array.ctypes.data)
    return binding


class Generation:
    """The two sessions and their bindings over one GreedyBuffers."""

    def __init__(
        self,
        graphs: gg.GenerationGraphs,
        prompt: np.ndarray,
        device: Device,
        mode: str,
        intra: int,
        inter: int,
        keep_gaps: bool = False,
    ) -> None:
        if device.cuda:
            raise ValueError(CUDA_REASON)
        self.buffers = greedy_loop.GreedyBuffers(graphs.shape, prompt, keep_gaps)
        b = self.buffers
        self.prefill_session = session.create(graphs.prefill, device, mode, intra, inter)
        self.decode_session = session.create(graphs.decode, device, mode, intra, inter)
        self._prefill = _bind(self.prefill_session, b.prefill_inputs, b.prefill_outputs)
        self._decode = _bind(self.decode_session, b.decode_inputs, b.decode_outputs)

    def run_prefill(self) -> None:
        self.prefill_session.run_with_iobinding(self._prefill)

    def run_decode(self) -> None:
        self.decode_session.run_with_iobinding(self._decode)

    def steps(self, new_tokens: int) -> GenerationSteps:
        return greedy_loop.generation_steps(
            self.buffers, self.run_prefill, self.run_decode, new_tokens
        )


def settings_extra(run: Generation) -> dict[str, str]:
    """A generate row's cache, attention kernel and timed step."""
    return {
        **greedy_loop.kv_cache_settings(run.buffers, BINDING),
        "attention_kernel": ATTENTION_KERNEL,
        "timed_step": "prefill: the prefill session's run_with_iobinding; decode: the decode "
        "session's, then the new position's key and value written into the cache",
    }


def build(
    params: Mapping[str, int],
    batch: int,
    seed: int,
    device: Device,
    mode: str,
    intra: int,
    inter: int,
    weights: Mapping[str, np.ndarray] | None = None,
    prompt: np.ndarray | None = None,
    keep_gaps: bool = False,
) -> Generation:
    """The generation of a cell (a random prompt, weights from `seed`) or of an equivalence
    case (`weights`, `prompt`)."""
    if prompt is None:
        prompt = greedy_loop.random_prompt(params, batch, seed)
    graphs = gg.build_generation_graphs(params, prompt.shape[0], prompt.shape[1], weights, seed)
    return Generation(graphs, prompt, device, mode, intra, inter, keep_gaps)
