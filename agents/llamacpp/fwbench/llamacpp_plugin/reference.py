"""The EquivalencePlugin half: canonical weights of a fresh GPT-2, and the gpt case's eval
logits (every position) and greedy generation through the generate workload's path.

llama.cpp has no training step (equivalence_trains False: both losses None) and builds only
the gpt model (equivalence_models). Float32 activations and KV cache, flash attention off; the
weights F32, or Q8_0 in the q8_0 variant, whose results are another computation."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fwbench.llamacpp_plugin.generation import FullSequences, Generator
from fwbench.llamacpp_plugin.gguf_model import check_weights, fresh_weights
from fwbench.llamacpp_plugin.session import ContextOptions, Session
from fwbench.runtime.architectures import transformer_config
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult, param_count
from fwbench.spec import load_catalogue


def canonical_weights(
    model: str, seed: int, params: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    if model != "gpt":
        raise ValueError(f"the llamacpp plugin builds gpt only, not {model}")
    resolved = load_catalogue().get("gpt").resolve_params(dict(params or {}))
    return fresh_weights(transformer_config("gpt", resolved), seed)


def equivalence(case: EquivalenceCase, weight_type: str, threads: int) -> EquivalenceResult:
    """Eval logits of every position of case.inputs and, with case.new_tokens, greedy tokens
    from case.inputs as the prompt (each a fresh context: the KV cache's cells differ)."""
    if case.model != "gpt":
        raise ValueError(f"the llamacpp plugin builds gpt only, not {case.model}")
    config = transformer_config("gpt", case.params)
    weights = {k: np.asarray(v, np.float32) for k, v in case.weights.items()}
    check_weights(config, weights)
    tokens = np.asarray(case.inputs)
    batch, length = tokens.shape

    def session(positions: int, at_once: int) -> Session:
        options = ContextOptions(batch, positions, at_once, threads, "float32", False)
        return Session(config, weights, weight_type, options)

    logits = FullSequences(session(length, batch * length), tokens).logits()
    generated = gaps = None
    if case.new_tokens:
        run = Generator(
            session(length + case.new_tokens, batch * length),
            tokens,
            case.new_tokens,
            keep_gaps=True,
        )
        run.prefill()
        for _ in range(case.new_tokens - 1):
            run.decode()
        generated, gaps = run.generated()
    return EquivalenceResult(
        param_count=param_count(weights),
        eval_logits=logits.astype(np.float32),
        loss_before=None,
        loss_after=None,
        generated=generated,
        generated_gaps=gaps,
    )
