"""Profiles of Keras' cells (protocol 1.10, docs/profiling.md): on its torch backend Keras'
layers run as PyTorch's operations, profiled by PyTorch's profiler and classed by PyTorch's
names (nothing unmapped); on the other backends the plugin declares no profiler and says why."""

from __future__ import annotations

import threading

from fwbench.runtime.plugin import PROFILE, WorkloadSpec
from fwbench.runtime.profiling import profile_steps


def test_the_torch_backend_profiles_and_the_others_say_why(plugin, backend, catalogue):
    reason = plugin.describe().no_profiler
    if backend != "torch":
        assert PROFILE not in plugin.optional_capabilities
        assert reason == f"Keras on {backend}: its profiler is not wired into fwbench yet"
        return
    assert PROFILE in plugin.optional_capabilities and not reason
    assert plugin.profiler().startswith("torch.profiler (torch ")
    gemm = catalogue.get("gemm")
    params = gemm.resolve_params({"m": 64, "n": 64, "k": 64})
    built = plugin.build(WorkloadSpec(gemm, "train", 1, "float32", params, 0, 0, "eager"))
    plugin.synchronize(built.step())
    result = profile_steps(
        plugin, "keras", built.step, 2, "", threading.Event(), lambda stage, done: None
    )
    assert not result.not_profiled and result.steps == 2, result.not_profiled
    assert [o.name for o in result.operations if not o.op_class] == []
    assert "matmul" in {o.op_class for o in result.operations}
