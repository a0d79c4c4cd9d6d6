"""PyTorch's profiles (runtime/torch_profile.py, protocol 1.10) on real cells, through the
runtime as an agent profiles them: every operation of a CNN's training step and of GPT-2's
generation is one the common mapping classes (nothing unmapped), the classes are the ones
those steps do (convolutions, matrix multiplies, the optimizer's update under its own name,
attention and the KV cache's copies), and the Chrome trace is torch's own."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from fwbench.runtime.plugin import PluginContext, WorkloadSpec
from fwbench.runtime.profiling import profile_steps
from fwbench.spec import load_catalogue
from fwbench.torch_plugin.plugin import TorchPlugin

CATALOGUE = load_catalogue()
SMALL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "prompt_len": 8, "new_tokens": 4}


def _profile(name: str, phase: str, batch: int, given: dict[str, int], trace: Path | None):
    plugin = TorchPlugin(PluginContext(device="cpu", threads=1))
    definition = CATALOGUE.get(name)
    params = definition.resolve_params({k: v for k, v in given.items() if k in definition.params})
    built = plugin.build(WorkloadSpec(definition, phase, batch, "float32", params, 0, 0, "eager"))
    plugin.synchronize(built.step())  # the timed loop's steps come first
    stages: list[tuple[str, int]] = []
    result = profile_steps(
        plugin,
        "torch",
        built.step,
        2,
        str(trace or ""),
        threading.Event(),
        lambda stage, done: stages.append((stage, done)),
    )
    assert not result.not_profiled, result.not_profiled
    assert result.steps == 2 and stages[-1] == ("profile", 2)
    return result


@pytest.mark.parametrize(
    ("name", "phase", "expected"),
    [
        ("lenet", "train", {"convolution", "matmul", "optimizer", "reduction", "elementwise"}),
        ("generate", "infer", {"matmul", "attention", "normalization", "kv_cache"}),
    ],
)
def test_every_operation_of_a_real_step_is_classed(name, phase, expected, tmp_path) -> None:
    result = _profile(name, phase, 2, SMALL, tmp_path if name == "lenet" else None)
    unmapped = [o.name for o in result.operations if not o.op_class]
    assert unmapped == [], unmapped
    classes = {o.op_class for o in result.operations}
    assert expected <= classes, classes
    inside = sum(o.self_nanoseconds for o in result.operations)
    assert 0 < inside <= result.step_nanoseconds * 1.05  # one thread: within the step
    if name == "lenet":
        names = {o.name for o in result.operations}
        assert any(n.startswith("Optimizer.step#SGD.step/aten::") for n in names), names
        trace = json.loads(Path(result.trace_file).read_text())
        assert result.trace_format == "chrome-trace" and trace["traceEvents"]
