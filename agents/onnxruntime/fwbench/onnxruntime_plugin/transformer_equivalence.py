"""The equivalence of bert and gpt (fwbench-reference's check) for the plugins that run
transformer_graphs' graphs, ONNX Runtime and OpenVINO: framework-free, each plugin handing
in how it computes a graph's logits and runs a generation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import numpy as np

from fwbench.onnxruntime_plugin.models import Graph
from fwbench.onnxruntime_plugin.transformer_graphs import build_transformer
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, param_count

# A graph's logits for int64 token ids (batch, seq) -> (batch, seq, vocab) float32.
Logits = Callable[[Graph, np.ndarray], np.ndarray]
# A greedy generation (the generate workload's path) at the params (prompt_len, new_tokens),
# with the weights and prompt -> (tokens, gaps), each (batch, new_tokens).
Generated = Callable[
    [Mapping[str, int], Mapping[str, np.ndarray], np.ndarray], tuple[np.ndarray, np.ndarray]
]


def equivalence(case: EquivalenceCase, logits: Logits, generated: Generated) -> EquivalenceResult:
    """Every position's logits from the case's weights (checked: every key used, none
    missing); a gpt case with new_tokens also its greedy tokens and their top-two gaps. No
    training: the losses are None."""
    tokens = np.asarray(case.inputs, np.int64)
    params = {**case.params, "seq_len": tokens.shape[1]}
    graph = build_transformer(case.model, params, case.weights)
    result = EquivalenceResult(param_count(case.weights), logits(graph, tokens), None, None)
    if case.model != "gpt" or not case.new_tokens:
        return result
    more = {"prompt_len": tokens.shape[1], "new_tokens": case.new_tokens}
    chosen, gaps = generated({**params, **more}, case.weights, tokens)
    return dataclasses.replace(result, generated=chosen, generated_gaps=gaps)
