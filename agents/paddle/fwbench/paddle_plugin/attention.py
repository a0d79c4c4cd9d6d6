"""Attention in Paddle, for the attention op and the transformers (transformers.py).

``paddle.nn.functional.scaled_dot_product_attention`` is Paddle's attention API. It takes
(batch, seq, heads, head_dim) tensors and picks a backend: flash attention (GPU, half
precision), memory-efficient attention (GPU) or "math". Paddle's CPU build enables only the
math backend (paddle.nn.attention.sdpa), which composes the textbook products out of single
ops: transpose to (batch, heads, seq, head_dim), scale Q, matmul, add the mask, softmax,
matmul, transpose back. So on this plugin's CPU there is no fused kernel: the default modes
call the API (what a Paddle user writes; `sdpa_kernel` names the backend it chose) and the
"plain" mode writes matmul-softmax-matmul out on (batch, heads, seq, head_dim) tensors, the
layout whose batched products need no transposes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import paddle
from paddle.nn import functional

from fwbench.paddle_plugin.training import MODES, compile_function

# The attention op's modes: the API in both model modes, and the written-out products.
ATTENTION_MODES = (*MODES, "plain")
PLAIN_KERNEL = "plain: matmul, softmax, matmul on (batch, heads, seq, head_dim), dygraph"
# Settings.extra["attention_layout"] of the op's inputs, per mode.
SDPA_LAYOUT, PLAIN_LAYOUT = "batch, seq, heads, head_dim", "batch, heads, seq, head_dim"
_SDPA_NOTE = {
    "math": "Paddle's composed ops: transpose, matmul, softmax, matmul; no fused CPU kernel",
    "flash_attn": "FlashAttention",
    "mem_efficient": "memory-efficient attention",
}


def sdpa_backend(shape: tuple[int, ...], dtype: str, causal: bool) -> str:
    """The backend scaled_dot_product_attention picks for (batch, seq, heads, head_dim)
    inputs of `dtype` on the current device, asked of Paddle's own selector (private
    functions: "unknown" where a Paddle release no longer has them as 3.3 does)."""
    try:
        from paddle.nn.functional import sdpa

        if not sdpa._config:
            sdpa.init_config()
        place = paddle.framework._current_expected_place_()
        kind = paddle.base.data_feeder.convert_dtype(dtype)
        size = paddle.Size(shape)
        params = sdpa.SDPParams(
            size, size, size, None, 0.0, causal, None, True, (kind,) * 3, (place,) * 3
        )
        return str(sdpa.select_sdp_for_sdpa(params))
    except (ImportError, AttributeError, RuntimeError, TypeError):
        return "unknown"


def sdpa_kernel(shape: tuple[int, ...], dtype: str, causal: bool) -> str:
    """Settings.extra["attention_kernel"] of a cell that calls the API."""
    backend = sdpa_backend(shape, dtype, causal)
    note = _SDPA_NOTE.get(backend)
    return f"sdpa:{backend} ({note})" if note else f"sdpa:{backend}"


def sdpa(
    q: paddle.Tensor,
    k: paddle.Tensor,
    v: paddle.Tensor,
    causal: bool = False,
    mask: paddle.Tensor | None = None,
) -> paddle.Tensor:
    """softmax(Q K^T / sqrt(head_dim) + mask) V on (batch, seq, heads, head_dim), no dropout;
    `mask` is additive, broadcast to (batch, heads, queries, keys)."""
    return functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=causal, training=False
    )


def causal_mask(queries: int, keys: int, dtype: str) -> paddle.Tensor:
    """(queries, keys), 0 where a query sees the key and -inf where not: each query, the last
    `queries` positions of the keys, sees the keys up to its own position."""
    seen = np.arange(keys)[None, :] <= np.arange(queries)[:, None] + (keys - queries)
    return paddle.to_tensor(np.where(seen, 0.0, -np.inf).astype(dtype))


def plain_attention(
    q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor, mask: paddle.Tensor | None = None
) -> paddle.Tensor:
    """The same on (batch, heads, seq, head_dim), as three operations; `mask` (causal_mask)
    is added to the scores."""
    scores = paddle.matmul(q, k, transpose_y=True) * (int(q.shape[-1]) ** -0.5)
    if mask is not None:
        scores = scores + mask
    return paddle.matmul(functional.softmax(scores, axis=-1), v)


def _inputs(
    shape: tuple[int, ...], dtype: str, seed: int, train: bool
) -> tuple[paddle.Tensor, ...]:
    rng = np.random.default_rng(seed)
    tensors = []
    for _ in range(3):
        tensor = paddle.to_tensor(rng.standard_normal(shape).astype(dtype))
        tensor.stop_gradient = not train
        tensors.append(tensor)
    return tuple(tensors)


def build_attention(
    batch: int, params: Mapping[str, int], dtype: str, seed: int, train: bool, mode: str
) -> tuple[Callable[[], object], dict[str, str]]:
    """The attention op's step and its settings: the forward on Q, K and V in the mode's
    layout; in training also their gradients for an all-ones upstream gradient (made once)."""
    heads, seq, head_dim, causal = (
        params["heads"],
        params["seq_len"],
        params["head_dim"],
        bool(params["causal"]),
    )
    forward: Callable[..., paddle.Tensor]
    if mode == "plain":
        shape, layout, kernel = (batch, heads, seq, head_dim), PLAIN_LAYOUT, PLAIN_KERNEL
        mask = causal_mask(seq, seq, dtype) if causal else None

        def forward(q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor) -> paddle.Tensor:
            return plain_attention(q, k, v, mask)

    else:
        shape, layout = (batch, seq, heads, head_dim), SDPA_LAYOUT
        kernel = sdpa_kernel(shape, dtype, causal)

        def attend(q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor) -> paddle.Tensor:
            return sdpa(q, k, v, causal)

        forward = compile_function(attend, mode)
    q, k, v = _inputs(shape, dtype, seed, train)
    settings = {"attention_kernel": kernel, "attention_layout": layout}
    if not train:

        def infer() -> object:
            with paddle.no_grad():
                return forward(q, k, v)

        return infer, settings
    upstream = paddle.ones(shape, dtype=dtype)

    def step() -> object:
        for tensor in (q, k, v):
            tensor.clear_gradient(set_to_zero=False)
        out = forward(q, k, v)
        out.backward(upstream)
        return out

    return step, settings
