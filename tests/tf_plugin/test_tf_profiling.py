"""TensorFlow's profiles (runtime/tf_profile.py, protocol 1.10) on real cells, through the
runtime as an agent profiles them: a CNN's training step (tf.function's kernels) and a small
GPT's generation, every kernel classed by the common mapping (nothing unmapped), the classes
those steps do, the warm-up step left out, and the trace TensorFlow's own XSpace."""

from __future__ import annotations

from pathlib import Path

import pytest
from profiled_cells import calls, check_classed, profile_cell
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from fwbench.runtime.plugin import PROFILE, PluginContext
from fwbench.tf_plugin.plugin import TensorFlowPlugin

_MODEL = {"convolution", "matmul", "optimizer", "reduction", "elementwise", "framework"}


@pytest.fixture(scope="module")
def plugin() -> TensorFlowPlugin:
    return TensorFlowPlugin(PluginContext(device="cpu"))


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        (("lenet", "train", "function"), _MODEL),
        (("lenet", "train", "eager"), _MODEL - {"framework"}),
        (("generate", "infer", "function"), {"matmul", "elementwise", "data_movement"}),
    ],
)
def test_every_kernel_of_a_real_step_is_classed(plugin, cell, expected, tmp_path) -> None:
    assert PROFILE in plugin.optional_capabilities and not plugin.describe().no_profiler
    assert plugin.profiler().startswith("tf.profiler (tensorflow ")
    result = profile_cell(plugin, "tensorflow", cell, trace=tmp_path)
    check_classed(result, expected, "xplane")
    assert result.trace_file.endswith(".xplane.pb")
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(result.trace_file).read_bytes())
    assert any(p.name == "/host:CPU" for p in space.planes)


def test_the_warm_up_step_is_left_out(plugin) -> None:
    cell = ("lenet", "train", "function")
    two, four = (profile_cell(plugin, "tensorflow", cell, steps) for steps in (2, 4))
    kernels = {"convolution", "matmul", "optimizer"}
    assert calls(two, kernels) == calls(four, kernels) and calls(two, kernels)
