"""Paddle's profiles (paddle_plugin/profiling.py, protocol 1.10) of real cells, through the
runtime as an agent profiles them: every operation of a LeNet training step (eager and a
to_static program run by the interpreter's threads) and of GPT-2's generation is one the
common mapping classes (nothing unmapped), the classes are the ones those steps do
(convolutions, matrix multiplies, the optimizer's update under its own name, the KV cache's
writes), the warm-up step is left out, and the Chrome trace is Paddle's own."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from profiled_cells import build_cell, profile_built

from fwbench.paddle_plugin import profiling
from fwbench.paddle_plugin.plugin import PaddlePlugin
from fwbench.runtime.plugin import PluginContext

TRAIN = {"convolution", "matmul", "optimizer", "reduction", "elementwise", "data_movement"}


def _built(name: str, phase: str, mode: str):
    plugin = PaddlePlugin(PluginContext(device="cpu", threads=1))
    return plugin, build_cell(plugin, (name, phase, mode))


def _profile(plugin, step, steps: int, trace: Path | None):
    result = profile_built(plugin, "paddle", step, steps, trace)
    assert result.profiler.startswith("paddle.profiler (paddle ")
    return result


@pytest.mark.parametrize(
    ("name", "phase", "mode", "expected"),
    [
        ("lenet", "train", "dygraph", TRAIN | {"framework"}),
        ("lenet", "train", "static", TRAIN | {"framework"}),
        ("generate", "infer", "dygraph", {"matmul", "normalization", "elementwise", "kv_cache"}),
    ],
)
def test_every_operation_of_a_real_step_is_classed(name, phase, mode, expected) -> None:
    plugin, step = _built(name, phase, mode)
    result = _profile(plugin, step, 2, None)
    unmapped = [o.name for o in result.operations if not o.op_class]
    assert unmapped == [], unmapped
    classes = {o.op_class for o in result.operations}
    assert expected <= classes, classes
    names = {o.name: o.op_class for o in result.operations}
    inside = sum(o.self_nanoseconds for o in result.operations)
    if mode == "dygraph":  # one thread: within the step
        assert 0 < inside <= result.step_nanoseconds * 1.05
    else:  # the interpreter's threads may overlap; their waiting is not counted twice
        assert names["interpreter_core_run"] == "framework"
        assert 0 < inside <= result.step_nanoseconds * 1.5
    if phase == "train":
        assert names["Optimization Step/momentum_"] == "optimizer"
        assert names["conv2d_grad"] == "convolution"  # a grad node as its kernel
    if name == "generate":
        assert names["fwbench::kv_cache_update/set_value_with_tensor_"] == "kv_cache"
        assert not any(n.startswith("fwbench::profiled_steps") for n in names)


def test_the_warm_up_step_is_left_out_and_the_trace_is_paddles(tmp_path, monkeypatch) -> None:
    """Calls per step are the same over 2 and 4 profiled steps (a warm-up counted in would
    make them differ); the trace is a Chrome trace of Paddle's events, and nothing else is
    written (Paddle's default: a profiler_log folder in the working directory)."""
    plugin, step = _built("lenet", "train", "dygraph")
    monkeypatch.chdir(tmp_path)
    two = _profile(plugin, step, 2, None)
    four = _profile(plugin, step, 4, tmp_path / "traces")
    calls = {o.name: o.calls for o in two.operations}
    assert calls == {o.name: o.calls for o in four.operations}
    assert calls["conv2d"] == 2 and calls["Optimization Step/momentum_"] == 10
    assert two.trace_file == ""
    trace = Path(four.trace_file)
    assert trace.parent == tmp_path / "traces" and four.trace_format == "chrome-trace"
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("name", "").startswith("conv2d") for e in events)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["traces"]


def test_cache_writes_run_no_range_outside_a_profile() -> None:
    assert isinstance(profiling.kv_cache_scope(), contextlib.nullcontext)
