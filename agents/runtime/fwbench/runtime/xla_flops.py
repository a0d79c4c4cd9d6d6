"""The forward FLOPs of a jitted JAX call (protocol 1.9's FlopCount), for the agents that run
one (jax's exported functions, Keras on the JAX backend): XLA's own cost analysis of the
computation compiled at the cell's shapes (an exported function's symbolic dimensions are
settled by compiling: the lowered module's own analysis fails on them). XLA counts a
multiply-add as 2 FLOPs, as the catalogue does, and also counts elementwise arithmetic (a
bias, an activation) at one FLOP per element, which PyTorch's FlopCounterMode and the ONNX
count leave out: the counter's name goes with the figure on every row. A computation with a
loop (a `lax.scan`, a recurrent layer) is not counted: XLA counts a while loop's body once,
not once per iteration (measured: a scan of ten 4x16 by 16x16 products counted 2,050 FLOPs,
one product's), and an undercount would flatter every agent's GFLOP/s."""

from __future__ import annotations

import re
from typing import Any

from fwbench.runtime.plugin import FlopCount

LOOP = "the computation has a loop, whose body XLA's cost analysis counts once, not per iteration"


def count(lowered: Any, jax_version: str) -> FlopCount:
    """`lowered`: what `jax.jit(f).lower(*args)` returns."""
    compiled = lowered.compile()
    counter = f"XLA cost analysis (jax {jax_version})"
    if re.search(r"\bwhile\(", compiled.as_text() or ""):
        return FlopCount(0.0, counter, LOOP)
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list | tuple):  # older jax: one dict per computation
        analysis = analysis[0] if analysis else {}
    flops = float((analysis or {}).get("flops", 0.0))
    if not flops > 0:
        return FlopCount(0.0, counter, "XLA's cost analysis gave no FLOPs for it")
    return FlopCount(flops, counter)
