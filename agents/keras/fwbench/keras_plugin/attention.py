"""Scaled dot-product attention in keras.ops: the `attention` op's workload and the kernel the
transformers (transformers.py) use, with the torch plugin's semantics.

Layout: queries, keys and values are (batch, seq_len, heads, head_dim), what
``keras.ops.dot_product_attention`` takes and what a dense projection of (batch, seq, hidden)
reshapes into without a transpose (the JAX plugin's choice too). The catalogue describes the op
as (batch, heads, seq_len, head_dim), PyTorch's layout: the elements and the work are the same
(Settings.extra["attention_layout"]).

The fused path is ``keras.ops.dot_product_attention``, which each backend maps to its own: on
torch, ``F.scaled_dot_product_attention`` (the inputs transposed to PyTorch's layout and back,
the kernel PyTorch's dispatcher's choice); on JAX, ``jax.nn.dot_product_attention`` (XLA's
implementation on a CPU; Keras picks cuDNN's flash attention on a GPU where it can); on
TensorFlow, which has no fused attention op, Keras' own einsum-softmax-einsum. The "plain" mode
writes the textbook matmul-softmax-matmul out in keras.ops (einsum, softmax, einsum), compiled
as the backend's default mode compiles.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import keras
import numpy as np

from fwbench.keras_plugin.backend import Backend
from fwbench.runtime.plugin import WorkloadSpec

PLAIN = "plain"
PLAIN_KERNEL = "plain: einsum, softmax, einsum (keras.ops)"
LAYOUT = "(batch, seq_len, heads, head_dim): keras.ops.dot_product_attention's own"
_FUSED = "keras.ops.dot_product_attention"
# Keras' flash_attention=None makes it probe torch's SDPAParams, a pybind constructor that
# torch.compile cannot trace: the graph breaks in every layer and recompiles past dynamo's
# limit (a GPT training step took 2-3 s instead of milliseconds). False lets PyTorch's own
# dispatcher pick the kernel, flash attention included where it applies.
_FLASH = False if keras.backend.backend() == "torch" else None
_BACKEND_KERNEL = {
    "torch": "torch.nn.functional.scaled_dot_product_attention",
    "jax": "jax.nn.dot_product_attention",
    "tensorflow": "Keras' einsum-softmax-einsum (TensorFlow has no fused attention op)",
}


def fused_kernel(backend: Backend) -> str:
    """The attention_kernel setting of the fused path on `backend`."""
    inner = _BACKEND_KERNEL[backend.name]
    if backend.name == "jax":
        inner += " (Keras picks cuDNN flash attention where it can)" if backend.on_gpu else " (xla)"
    elif backend.name == "torch":
        inner += " (the kernel PyTorch's dispatcher picks)"
    return f"{_FUSED}: {inner}"


def attend(q: Any, k: Any, v: Any, *, causal: bool = False, mask: Any = None) -> Any:
    """softmax(Q K^T / sqrt(head_dim)) V, fused; `mask` (bool, broadcast to (batch, heads,
    queries, keys)) hides the keys a query must not see. `causal` with as many queries as
    keys only (Keras aligns its causal mask at the start)."""
    return keras.ops.dot_product_attention(
        q, k, v, mask=mask, is_causal=causal, flash_attention=_FLASH
    )


def plain_attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    """softmax(Q K^T / sqrt(d)) V as three operations; causal rows see the keys up to their
    own position (queries are the last positions of the keys)."""
    scores = keras.ops.einsum("bqhd,bkhd->bhqk", q, k) * (int(q.shape[-1]) ** -0.5)
    if causal:
        queries, keys = int(q.shape[1]), int(k.shape[1])
        seen = np.tril(np.ones((queries, keys), dtype=bool), keys - queries)
        scores = keras.ops.where(seen, scores, -np.inf)
    weights = keras.ops.softmax(scores, axis=-1)
    return keras.ops.einsum("bhqk,bkhd->bqhd", weights, v)


def modes(backend_modes: tuple[str, ...]) -> tuple[str, ...]:
    """The op's modes: the fused kernel in each of the backend's, then the plain products."""
    return (*backend_modes, PLAIN)


def build_attention(
    spec: WorkloadSpec, backend: Backend, default_mode: str
) -> tuple[Callable[[], object], dict[str, str]]:
    """The op's step (forward; training: forward and the gradients to Q, K and V for an
    all-ones upstream gradient, as ops.py's) and its settings; "plain" compiles as
    `default_mode` (the mode it compiled as: "compiled_as")."""
    params, mode, train = spec.params, spec.mode, spec.phase == "train"
    shape = (spec.batch_size, params["seq_len"], params["heads"], params["head_dim"])
    causal = bool(params["causal"])
    generator = keras.random.SeedGenerator(spec.seed)
    q, k, v = (keras.random.normal(shape, dtype=spec.dtype, seed=generator) for _ in range(3))
    if mode == PLAIN:
        forward, kernel, compiled = (
            lambda q, k, v: plain_attention(q, k, v, causal),
            PLAIN_KERNEL,
            default_mode,
        )
    else:
        forward, kernel, compiled = (
            lambda q, k, v: attend(q, k, v, causal=causal),
            fused_kernel(backend),
            mode,
        )
    step = backend.op_step(forward, (q, k, v), train, compiled)
    return step, {"attention_kernel": kernel, "attention_layout": LAYOUT, "compiled_as": compiled}
