"""JAX's profiles (runtime/jax_profile.py, protocol 1.10) on real cells, through the runtime
as an agent profiles them: a CNN's training step and a small GPT's generation, XLA's thunks
classed by the common mapping's "xla" names (nothing unmapped: YNNPACK's fusions named after
the dot, reduction or pooling their HLO holds), the warm-up step left out, and the trace
JAX's own XSpace."""

from __future__ import annotations

import jax.profiler
import pytest
from profiled_cells import calls, check_classed, profile_cell

from fwbench.jax_plugin.plugin import JaxPlugin
from fwbench.runtime.plugin import PROFILE, PluginContext


@pytest.fixture(scope="module")
def plugin() -> JaxPlugin:
    return JaxPlugin(PluginContext(device="cpu"))


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        (("lenet", "train", "jit"), {"convolution", "matmul", "reduction", "elementwise"}),
        (("generate", "infer", "jit"), {"matmul", "reduction", "elementwise", "data_movement"}),
    ],
)
def test_every_thunk_of_a_real_step_is_classed(plugin, cell, expected, tmp_path) -> None:
    assert PROFILE in plugin.optional_capabilities and not plugin.describe().no_profiler
    assert plugin.profiler().startswith("jax.profiler (jax ")
    result = profile_cell(plugin, "jax", cell, trace=tmp_path)
    check_classed(result, expected | {"framework"}, "xplane")
    assert any(o.name == "ynn_fusion[dot]" for o in result.operations)
    assert result.trace_file.endswith(".xplane.pb")
    planes = jax.profiler.ProfileData.from_file(result.trace_file).planes
    assert any(p.name == "/host:CPU" for p in planes)


def test_the_warm_up_step_is_left_out(plugin) -> None:
    cell = ("lenet", "train", "jit")
    two, four = (profile_cell(plugin, "jax", cell, steps) for steps in (2, 4))
    thunks = {"convolution", "matmul", "reduction"}
    assert calls(two, thunks) == calls(four, thunks) and calls(two, thunks)
