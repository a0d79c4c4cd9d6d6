"""Real cells profiled through the runtime as an agent profiles them (protocol 1.10), for the
plugins' profiling tests (tests/tf_plugin, tests/jax_plugin, tests/keras_plugin,
tests/paddle_plugin): the cell
built with small transformer sizes, its timed loop's first step run, then `steps` steps
through fwbench.runtime.profiling.profile_steps."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import FrameworkPlugin, WorkloadSpec
from fwbench.runtime.profiling import profile_steps
from fwbench.spec import load_catalogue

SMALL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "prompt_len": 8, "new_tokens": 4}
CATALOGUE = load_catalogue()


def profile_cell(
    plugin: FrameworkPlugin,
    framework: str,
    cell: tuple[str, str, str],
    steps: int = 2,
    trace: Path | None = None,
) -> agent_pb2.ProfileResult:
    """Cell (workload, phase, mode) at batch 2, profiled for `steps` steps; checks the
    profile was taken."""
    return profile_built(plugin, framework, build_cell(plugin, cell), steps, trace)


def build_cell(plugin: FrameworkPlugin, cell: tuple[str, str, str]) -> Callable[[], object]:
    """Cell (workload, phase, mode) at batch 2, its first step run; its step."""
    name, phase, mode = cell
    definition = CATALOGUE.get(name)
    params = definition.resolve_params({k: v for k, v in SMALL.items() if k in definition.params})
    built = plugin.build(WorkloadSpec(definition, phase, 2, "float32", params, 0, 0, mode))
    plugin.synchronize(built.step())  # the timed loop's steps come first
    return built.step


def profile_built(
    plugin: FrameworkPlugin,
    framework: str,
    step: Callable[[], object],
    steps: int = 2,
    trace: Path | None = None,
) -> agent_pb2.ProfileResult:
    """A built cell's `steps` steps through the runtime's profile_steps; checks the profile
    was taken."""
    stages: list[tuple[str, int]] = []
    result = profile_steps(
        plugin,
        framework,
        step,
        steps,
        str(trace or ""),
        threading.Event(),
        lambda stage, done: stages.append((stage, done)),
    )
    assert not result.not_profiled, result.not_profiled
    assert result.steps == steps and stages[-1] == ("profile", steps)
    return result


def shares(result: agent_pb2.ProfileResult) -> dict[str, float]:
    """Each class's share of the profiled step ("" for unmapped)."""
    found: dict[str, float] = {}
    for operation in result.operations:
        share = operation.self_nanoseconds / result.step_nanoseconds
        found[operation.op_class] = found.get(operation.op_class, 0.0) + share
    return found


def calls(result: agent_pb2.ProfileResult, classes: set[str]) -> dict[str, float]:
    """Calls per step of the operations of `classes` (the warm-up step's, were they counted,
    would change them with the steps)."""
    return {o.name: o.calls for o in result.operations if o.op_class in classes}


def check_classed(result: agent_pb2.ProfileResult, expected: set[str], trace_format: str) -> None:
    """Nothing unmapped, the classes expected among those found, and the trace written."""
    unmapped = [o.name for o in result.operations if not o.op_class]
    assert unmapped == [], unmapped
    assert expected <= set(shares(result)), shares(result)
    assert result.trace_format == trace_format and Path(result.trace_file).is_file()
