"""Scaled dot-product attention: the `attention` op's workload and the kernel the transformers
use, with the torch plugin's semantics (fwbench.torch_plugin.transformers).

Layout: queries, keys and values are (batch, seq_len, heads, head_dim), which is what
``jax.nn.dot_product_attention`` takes and what a dense projection of (batch, seq, hidden)
reshapes into without a transpose. The catalogue describes the op as (batch, heads, seq_len,
head_dim), PyTorch's layout; the elements and the work are the same, and the op's inputs are
drawn in this layout so that neither mode times a transpose (Settings.extra["attention_layout"]).

"jit" runs ``jax.nn.dot_product_attention``. Its default implementation (None) is XLA's in this
jax everywhere, GPUs included ("defaults to XLA for now"), so the implementation is chosen
here: on a GPU cuDNN's fused kernel where it compiles for the shapes and dtype (cuDNN has no
float32 attention, for one), XLA's otherwise; on a CPU XLA's. Settings.extra["attention_kernel"]
names the one that runs. "plain" writes the textbook matmul-softmax-matmul out (einsum,
softmax, einsum), also under jit, so XLA fuses what it can but nothing attention-specific.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import jax
import jax.numpy as jnp
from jax import Array

from fwbench.jax_plugin.ops import bind_step

ATTENTION_MODES = ("jit", "plain")
PLAIN_KERNEL = "plain: einsum, softmax, einsum (jit)"
LAYOUT = "(batch, seq_len, heads, head_dim): jax.nn.dot_product_attention's own"
FUSED = "jax.nn.dot_product_attention"


@dataclass(frozen=True)
class Attention:
    """jax.nn.dot_product_attention with a fixed implementation ("xla" or "cudnn")."""

    implementation: Literal["xla", "cudnn"] = "xla"

    def __call__(
        self, q: Array, k: Array, v: Array, *, causal: bool = False, mask: Array | None = None
    ) -> Array:
        return jax.nn.dot_product_attention(
            q, k, v, mask=mask, is_causal=causal, implementation=self.implementation
        )

    @property
    def kernel(self) -> str:
        return f"{FUSED} ({self.implementation})"


XLA = Attention("xla")


def plain_attention(q: Array, k: Array, v: Array, causal: bool = False) -> Array:
    """softmax(Q K^T / sqrt(d)) V as three operations; causal rows see the keys up to their
    own position (queries are the last positions of the keys)."""
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (q.shape[-1] ** -0.5)
    if causal:
        queries, keys = q.shape[1], k.shape[1]
        seen = jnp.tril(jnp.ones((queries, keys), bool), keys - queries)
        scores = jnp.where(seen, scores, -jnp.inf)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)


def choose(
    device: jax.Device,
    query: jax.ShapeDtypeStruct,
    keys: jax.ShapeDtypeStruct,
    *,
    causal: bool = False,
    masked: bool = False,
    train: bool = False,
) -> Attention:
    """cuDNN's fused attention on a GPU when it compiles for these shapes (forward, and with
    `train` the backward too; `masked`: a boolean key mask as generation's decode passes),
    XLA's otherwise and on every other device. Compiling the attention alone is the test:
    jax raises for what cuDNN does not support."""
    if device.platform != "gpu":
        return XLA
    cudnn = Attention("cudnn")
    mask = jnp.ones((1, 1, 1, keys.shape[1]), bool) if masked else None

    def forward(q: Array, k: Array, v: Array) -> Array:
        return cudnn(q, k, v, causal=causal, mask=mask)

    def probe(q: Array, k: Array, v: Array) -> object:
        if not train:
            return forward(q, k, v)
        out, vjp = jax.vjp(forward, q, k, v)
        return vjp(out)

    try:
        with jax.default_device(device):
            jax.jit(probe).lower(query, keys, keys).compile()
    except Exception:  # noqa: BLE001 (any refusal, jax's or cuDNN's, means "not here")
        return XLA
    return cudnn


def build_attention(
    batch: int,
    params: Mapping[str, int],
    dtype: jnp.dtype,
    key: Array,
    train: bool,
    mode: str,
    device: jax.Device,
) -> tuple[Callable[[], object], str]:
    """The op's step (forward; training: forward and backward to Q, K and V with an all-ones
    upstream gradient, as ops.py) and the name of the kernel it runs."""
    shape = (batch, params["seq_len"], params["heads"], params["head_dim"])
    causal = bool(params["causal"])
    q, k, v = (jax.random.normal(part, shape, dtype) for part in jax.random.split(key, 3))
    if mode == "plain":
        return bind_step(lambda q, k, v: plain_attention(q, k, v, causal), (q, k, v), train), (
            PLAIN_KERNEL
        )
    struct = jax.ShapeDtypeStruct(shape, dtype)
    attend = choose(device, struct, struct, causal=causal, train=train)
    step = bind_step(lambda q, k, v: attend(q, k, v, causal=causal), (q, k, v), train)
    return step, attend.kernel
