"""OpenVINO's profiles (openvino_plugin/profiling.py, protocol 1.10) of real graph cells, through
the runtime as an agent profiles them: a second compilation of the cell's model with
performance counters on runs the steps, every executed node's type the common mapping
classes (nothing unmapped; GPT-2's attention fused into one Snippets Subgraph is attention),
the warm-up's inferences left out (the counters are read around the profiled steps), no trace
file; what OpenVINO does not profile here (generation, several streams) says why, and the
timed request is the cell's own again afterwards."""

from __future__ import annotations

import threading

import pytest

from fwbench.openvino_plugin import compiled
from fwbench.openvino_plugin.plugin import OpenVinoPlugin
from fwbench.runtime.plugin import PROFILE, PluginContext, WorkloadSpec
from fwbench.runtime.profiling import profile_steps
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
SMALL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "seq_len": 16, "prompt_len": 8}


@pytest.fixture(scope="module")
def plugin() -> OpenVinoPlugin:
    return OpenVinoPlugin(PluginContext(device="cpu", threads=1))


def _profile(plugin, name: str, steps: int, mode: str = "latency", threads: int = 0, trace=""):
    definition = CATALOGUE.get(name)
    params = definition.resolve_params({k: v for k, v in SMALL.items() if k in definition.params})
    spec = WorkloadSpec(definition, "infer", 2, "float32", params, 0, threads, mode)
    built = plugin.build(spec)
    plugin.synchronize(built.step())
    timed = plugin._profilable.bound.request if plugin._profilable else None
    result = profile_steps(
        plugin, "openvino", built.step, steps, str(trace), threading.Event(), lambda *_: None
    )
    if timed is not None:
        assert plugin._profilable.bound.request is timed  # the timed request again
    return result


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("lenet", {"convolution", "matmul", "reduction"}),
        ("gpt", {"matmul", "attention", "normalization", "elementwise", "data_movement"}),
    ],
)
def test_every_node_of_a_real_graph_is_classed(plugin, name, expected, tmp_path) -> None:
    result = _profile(plugin, name, 3, trace=tmp_path)
    assert not result.not_profiled, result.not_profiled
    assert result.profiler.startswith("OpenVINO performance counters (openvino ")
    assert [o.name for o in result.operations if not o.op_class] == []
    classes = {o.op_class for o in result.operations}
    assert expected <= classes, classes
    # The fresh compilation's first inferences (several times a step) are not counted.
    inside = sum(o.self_nanoseconds for o in result.operations)
    assert 0 < inside <= result.step_nanoseconds * 1.05
    assert result.trace_file == "" and list(tmp_path.iterdir()) == []  # OpenVINO writes none
    if name == "gpt":
        names = {o.name: o.op_class for o in result.operations}
        fused = [n for n, c in names.items() if n.startswith("Subgraph[") and c == "attention"]
        assert fused and all("MatMul" in n and "Softmax" in n for n in fused), names


def test_the_warm_up_is_left_out_the_same_over_2_and_4_steps(plugin) -> None:
    two = {o.name: o.calls for o in _profile(plugin, "lenet", 2).operations}
    four = {o.name: o.calls for o in _profile(plugin, "lenet", 4).operations}
    assert two == four and two["Convolution"] == 2  # LeNet's two convolution nodes a step


def test_describe_offers_the_profiler(plugin) -> None:
    assert PROFILE in plugin.optional_capabilities
    assert plugin.profiler().startswith("OpenVINO performance counters")


def test_generation_is_not_profiled_and_says_why(plugin) -> None:
    result = _profile(plugin, "generate", 2)
    assert result.not_profiled.startswith("the profiler failed: OpenVINO profiles the")


def test_several_streams_are_not_profiled_and_say_why(plugin, monkeypatch) -> None:
    """Two streams (what "throughput" makes on a host with more cores than this one)."""

    def two_streams(model, mode: str, threads: int, profiling: bool = False):
        config = {"NUM_STREAMS": 2, "INFERENCE_NUM_THREADS": 2, "PERF_COUNT": profiling}
        return compiled.core().compile_model(model, compiled.DEVICE, config)

    monkeypatch.setattr(compiled, "compile_for", two_streams)
    result = _profile(plugin, "lenet", 2, mode="throughput")
    assert int(plugin._profilable.bound.compiled.get_property("NUM_STREAMS")) == 2
    assert result.not_profiled.startswith("the profiler failed: OpenVINO's counters average")
    assert "2 streams" in result.not_profiled and "latency" in result.not_profiled
