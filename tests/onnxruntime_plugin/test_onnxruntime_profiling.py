"""ONNX Runtime's profiles (onnxruntime_plugin/profiling.py, protocol 1.10) of real graph cells,
through the runtime as an agent profiles them: a second session of the cell's graph made with
profiling on runs the steps, every node type the common mapping classes (nothing unmapped),
the warm-up step's nodes left out (one Conv call a LeNet step, not more), the trace ORT's
own; what ORT does not profile here (generation) says why, and the timed session is the cell's
own again afterwards."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fwbench.onnxruntime_plugin.plugin import OnnxRuntimePlugin
from fwbench.runtime.plugin import PluginContext, WorkloadSpec
from fwbench.runtime.profiling import profile_steps
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
SMALL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "seq_len": 16, "prompt_len": 8}


def _profile(plugin, name: str, trace: Path | None):
    definition = CATALOGUE.get(name)
    params = definition.resolve_params({k: v for k, v in SMALL.items() if k in definition.params})
    built = plugin.build(WorkloadSpec(definition, "infer", 2, "float32", params, 0, 0, "basic"))
    plugin.synchronize(built.step())
    before = plugin._profilable.bound.session if plugin._profilable else None
    result = profile_steps(
        plugin, "onnxruntime", built.step, 3, str(trace or ""), threading.Event(), lambda *_: None
    )
    if before is not None:
        assert plugin._profilable.bound.session is before  # the timed session again
    return result


@pytest.mark.parametrize(("name", "expected"), [("lenet", "convolution"), ("bert", "matmul")])
def test_every_node_of_a_real_graph_is_classed(name, expected, tmp_path) -> None:
    plugin = OnnxRuntimePlugin(PluginContext(device="cpu", threads=1))
    result = _profile(plugin, name, tmp_path if name == "lenet" else None)
    assert not result.not_profiled, result.not_profiled
    assert [o.name for o in result.operations if not o.op_class] == []
    classes = {o.op_class for o in result.operations}
    assert expected in classes, classes
    if name == "lenet":
        calls = {o.name: o.calls for o in result.operations}
        assert calls["Conv"] == 2  # LeNet's two convolutions a step: the warm-up's left out
        assert result.trace_format == "chrome-trace"
        assert json.loads(Path(result.trace_file).read_text())


def test_generation_is_not_profiled_and_says_why() -> None:
    plugin = OnnxRuntimePlugin(PluginContext(device="cpu", threads=1))
    result = _profile(plugin, "generate", None)
    assert result.not_profiled.startswith("the profiler failed: ONNX Runtime profiles the")
