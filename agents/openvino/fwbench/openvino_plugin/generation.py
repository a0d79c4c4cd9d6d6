"""The generate workload on OpenVINO: the onnxruntime plugin's prefill and decode graphs
(generation_graphs, an explicit KV cache as graph inputs and outputs, not OpenVINO's stateful
model: make_stateful would hide the cache in the compiled model's variables, read and written
by ReadValue/Assign, a different program from the other agents' explicit one), each compiled
once with the cell's hint and threads, over greedy_loop's buffers.

Each graph's infer request gets every input and output as a tensor sharing the buffers'
memory, set once: the cache stays where NumPy keeps it and the loop writes one position per
layer into it between steps."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import openvino as ov

from fwbench.onnxruntime_plugin import generation_graphs as gg
from fwbench.onnxruntime_plugin import greedy_loop
from fwbench.openvino_plugin import compiled
from fwbench.runtime.plugin import GenerationSteps

SHARING = (
    "OpenVINO infer requests with every input and output set once as tensors sharing the "
    "buffers' memory (OpenVINO's explicit cache, not its stateful make_stateful model)"
)


def _request(
    serialized: bytes,
    inputs: Mapping[str, np.ndarray],
    outputs: Mapping[str, np.ndarray],
    mode: str,
    threads: int,
) -> tuple[ov.CompiledModel, ov.InferRequest]:
    model = compiled.compile_for(compiled.read(serialized), mode, threads)
    request = model.create_infer_request()
    for name, array in inputs.items():
        request.set_tensor(name, ov.Tensor(array, shared_memory=True))
    for port in model.outputs:  # a port may carry several names (an Identity folded away)
        (name,) = set(port.get_names()) & set(outputs)
        request.set_tensor(port, ov.Tensor(outputs[name], shared_memory=True))
    return model, request


class Generation:
    """The two compiled graphs and their requests over one GreedyBuffers."""

    def __init__(
        self,
        graphs: gg.GenerationGraphs,
        prompt: np.ndarray,
        mode: str,
        threads: int,
        keep_gaps: bool = False,
    ) -> None:
        self.buffers = greedy_loop.GreedyBuffers(graphs.shape, prompt, keep_gaps)
        b = self.buffers
        # Both compiled models kept referenced: a request outliving its model crashes.
        self.prefill_compiled, self.prefill_request = _request(
            graphs.prefill, b.prefill_inputs, b.prefill_outputs, mode, threads
        )
        self.decode_compiled, self.decode_request = _request(
            graphs.decode, b.decode_inputs, b.decode_outputs, mode, threads
        )

    def steps(self, new_tokens: int) -> GenerationSteps:
        return greedy_loop.generation_steps(
            self.buffers, self.prefill_request.infer, self.decode_request.infer, new_tokens
        )


def build(
    params: Mapping[str, int],
    batch: int,
    seed: int,
    mode: str,
    threads: int,
    weights: Mapping[str, np.ndarray] | None = None,
    prompt: np.ndarray | None = None,
    keep_gaps: bool = False,
) -> Generation:
    """The generation of a cell (a random prompt, weights from `seed`) or of an equivalence
    case (`weights`, `prompt`)."""
    if prompt is None:
        prompt = greedy_loop.random_prompt(params, batch, seed)
    graphs = gg.build_generation_graphs(params, prompt.shape[0], prompt.shape[1], weights, seed)
    return Generation(graphs, prompt, mode, threads, keep_gaps)
