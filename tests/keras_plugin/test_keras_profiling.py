"""Profiles of Keras' cells (protocol 1.10, docs/profiling.md), on whichever backend
KERAS_BACKEND names: Keras' layers run as the backend's operations, profiled by its profiler
(PyTorch's, TensorFlow's, JAX's) and classed by its names (torch, tensorflow, xla): a CNN's
training step and a small GPT's generation leave nothing unmapped, the warm-up step is left
out, and the trace is the backend's own."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from fwbench.runtime.plugin import PROFILE

sys.path.insert(0, str(Path(__file__).parents[1]))  # profiled_cells

from profiled_cells import calls, check_classed, profile_cell

PROFILERS = {"torch": "torch.profiler", "tensorflow": "tf.profiler", "jax": "jax.profiler"}
TRACES = {"torch": "chrome-trace", "tensorflow": "xplane", "jax": "xplane"}
MODE = {"torch": "eager", "tensorflow": "function", "jax": "jit"}


@pytest.mark.parametrize(
    ("name", "phase", "expected"),
    [
        ("lenet", "train", {"convolution", "matmul", "reduction", "elementwise"}),
        ("generate", "infer", {"matmul", "elementwise"}),
    ],
)
def test_the_backends_profiler_classes_every_operation(
    plugin, backend, name, phase, expected, tmp_path
):
    assert PROFILE in plugin.optional_capabilities and not plugin.describe().no_profiler
    assert plugin.profiler().startswith(f"{PROFILERS[backend]} (")
    cell = (name, phase, MODE[backend])
    result = profile_cell(plugin, "keras", cell, trace=tmp_path)
    check_classed(result, expected, TRACES[backend])


def test_the_warm_up_step_is_left_out(plugin, backend) -> None:
    cell = ("lenet", "train", MODE[backend])
    two, four = (profile_cell(plugin, "keras", cell, steps) for steps in (2, 4))
    kernels = {"convolution", "matmul"}
    assert calls(two, kernels) == calls(four, kernels) and calls(two, kernels)
