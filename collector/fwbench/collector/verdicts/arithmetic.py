"""Whether two compared rows did the same arithmetic.

A float32 cell on a GPU runs its matrix products and convolutions either in float32 or on
tensor cores in TF32 (or bf16), by the framework's defaults and switches: PyTorch multiplies
in float32 unless told otherwise and convolves in TF32, JAX (XLA) and TensorFlow use TF32 for
both. On an H200 that alone made JAX's float32 gemm 5.9x PyTorch's (docs/gpu-host.md). Each
plugin reports what its GPU float32 rows ran in under the settings keys below
(docs/writing-an-agent.md); a comparison of rows whose values differ times different
arithmetic, and its verdict says so. A row without the keys (a CPU row, an agent that does not
report them) is not judged."""

from __future__ import annotations

import json
from typing import Any

# settings key -> what it is, for the reader
KEYS = {"float32_matmul": "float32 matmul", "float32_conv": "float32 convolution"}
SAME_ARITHMETIC = "--agent-env FWBENCH_TF32=off (or on) gives every agent the same"


def arithmetic(settings: Any) -> dict[str, str]:
    """The arithmetic keys of a row's settings (the results table's JSON text, or a dict)."""
    if isinstance(settings, str):
        try:
            settings = json.loads(settings) if settings else {}
        except ValueError:
            return {}
    if not isinstance(settings, dict):
        return {}
    return {key: str(settings[key]) for key in KEYS if settings.get(key)}


def difference(agent: str, mine: dict[str, str], other: str, theirs: dict[str, str]) -> str:
    """ "" when `agent`'s and `other`'s rows did the same arithmetic (or one did not say);
    else a note naming each difference and how to make them the same."""
    parts = [
        f"{label} {mine[key]} in {agent}, {theirs[key]} in {other}"
        for key, label in KEYS.items()
        if key in mine and key in theirs and mine[key] != theirs[key]
    ]
    if not parts:
        return ""
    return f"not the same arithmetic: {'; '.join(parts)} ({SAME_ARITHMETIC})"


def by_cell(results: Any) -> dict[int, dict[str, str]]:
    """Each row's arithmetic keys by its cell index (a results DataFrame)."""
    if "settings" not in getattr(results, "columns", ()):
        return {}
    return {
        int(c): arithmetic(s) for c, s in zip(results["cell"], results["settings"], strict=True)
    }


def between(
    label: str,
    mine: dict[int, dict[str, str]],
    cell: int,
    other: str,
    theirs: dict[int, dict[str, str]],
    other_cell: int,
) -> str:
    """difference() for row `cell` of `mine` (by_cell) against row `other_cell` of `theirs`."""
    return difference(label, mine.get(cell, {}), other, theirs.get(other_cell, {}))
