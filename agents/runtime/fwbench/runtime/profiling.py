"""A cell's steps under the framework's own profiler, after the timed loop (protocol 1.10,
RunRequest.profile): the timed samples are taken before the profiler starts, so they are the
same with and without it.

A plugin that profiles declares the optional capability "profile" and implements
`profiler() -> str` (the profiler and its version, which Describe reports) and
`profile(run_steps, trace_dir) -> ProfiledSteps`: it starts its profiler and calls
`run_steps(on_step)` once. The runtime runs one warm-up step (a profiler's first step carries
its own start-up: PyTorch's took 100x a LeNet step), calls `on_step(0)`, then runs the profiled
steps, each synchronized, timed together, calling `on_step(i)` after step i: a profiler
counts only what runs after on_step(0) (torch_profile.py marks it with a range). The plugin
stops its profiler and returns every operation's self time summed over the profiled steps,
with the trace it wrote into `trace_dir` (None: no trace asked). The runtime divides by the
steps, and sends the operations by name (each once), classed, with the step's wall time. An
agent without a profiler, or whose profiler fails, answers with `not_profiled`: the cell's
samples stand either way."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import PROFILE, FrameworkPlugin, PluginDescription
from fwbench.runtime.timing import RunCancelled
from fwbench.spec import op_classes


@dataclass(frozen=True)
class OperationSample:
    """One operation over all the profiled steps: its self time (inside it and not inside
    another operation it called) and how often it ran."""

    name: str
    self_nanoseconds: int
    calls: int
    # Where only the plugin knows the class (its context); "" lets the mapping decide
    # (fwbench/spec/op_classes.toml, by the framework's name).
    op_class: str = ""


@dataclass(frozen=True)
class ProfiledSteps:
    operations: Sequence[OperationSample]
    trace_file: str = ""  # a path in trace_dir, "" when none was written
    trace_format: str = ""  # one of op_classes.TRACE_FORMATS when trace_file is set
    # Whose names the operations' are (a framework of fwbench/spec/op_classes.toml): "" for
    # the plugin's own; Keras on PyTorch gives "torch".
    names: str = ""


OnStep = Callable[[int], None]  # after the warm-up step (0) and after each profiled step (1..)
RunSteps = Callable[[OnStep], None]


class ProfilePlugin(FrameworkPlugin, Protocol):
    def profiler(self) -> str: ...

    def profile(self, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps: ...


def profiler_of(plugin: FrameworkPlugin) -> str:
    """Describe.profiler: the plugin's profiler, "" when it has none."""
    if PROFILE not in plugin.optional_capabilities:
        return ""
    return str(plugin.profiler())  # type: ignore[attr-defined]


def profile_steps(
    plugin: FrameworkPlugin,
    framework: str,
    step: Callable[[], object],
    steps: int,
    trace_dir: str,
    cancel: threading.Event,
    on_progress: Callable[[str, int], None],
) -> agent_pb2.ProfileResult:
    """`steps` more steps of the cell under the plugin's profiler (the request checked their
    number). Raises RunCancelled when the run is cancelled; a profiler's own failure is
    answered with not_profiled."""
    profiling = _Steps(plugin, step, steps, cancel, on_progress)
    folder = Path(trace_dir) if trace_dir else None
    name = profiler_of(plugin)
    try:
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        profiled = plugin.profile(profiling, folder)  # type: ignore[attr-defined]
    except RunCancelled:
        raise
    except Exception as error:  # noqa: BLE001 (the profiler's failure, named in the reply)
        text = " ".join(str(error).split())[:300] or type(error).__name__
        return agent_pb2.ProfileResult(profiler=name, not_profiled=f"the profiler failed: {text}")
    if profiling.done != steps or profiling.wall_ns <= 0:
        return agent_pb2.ProfileResult(
            profiler=name,
            not_profiled=f"the profiler ran {profiling.done} of the {steps} steps asked",
        )
    return agent_pb2.ProfileResult(
        profiler=name,
        steps=steps,
        step_nanoseconds=profiling.wall_ns // steps,
        operations=_per_step(profiled.operations, steps, profiled.names or framework),
        trace_file=profiled.trace_file,
        trace_format=profiled.trace_format if profiled.trace_file else "",
    )


def no_profiler(description: PluginDescription) -> str:
    """Describe.no_profiler of a plugin without the capability: its own reason, or the plain
    fact."""
    return description.no_profiler or "this agent's plugin has no profiler"


class _Steps:
    """The steps the plugin's profiler watches: run once, a warm-up step first, then the
    profiled ones, each synchronized, timed together."""

    def __init__(
        self,
        plugin: FrameworkPlugin,
        step: Callable[[], object],
        steps: int,
        cancel: threading.Event,
        on_progress: Callable[[str, int], None],
    ) -> None:
        self._plugin, self._step, self._steps = plugin, step, steps
        self._cancel, self._on_progress = cancel, on_progress
        self.done, self.wall_ns = 0, 0

    def __call__(self, on_step: OnStep = lambda _: None) -> None:
        if self.done:
            raise RuntimeError("the plugin ran the profiled steps twice")
        self._on_progress("profile", 0)
        self._plugin.synchronize(self._step())  # the warm-up step, outside the profile
        on_step(0)
        start = time.perf_counter_ns()
        for done in range(1, self._steps + 1):
            if self._cancel.is_set():
                raise RunCancelled()
            self._plugin.synchronize(self._step())
            on_step(done)
            self.done = done
            self._on_progress("profile", done)
        self.wall_ns = time.perf_counter_ns() - start


def _per_step(
    operations: Sequence[OperationSample], steps: int, framework: str
) -> list[agent_pb2.OperationTime]:
    """Each name once (the plugin's duplicates added up), classified, largest first."""
    merged: dict[str, list[int]] = {}
    given: dict[str, str] = {}
    for operation in operations:
        if not operation.name:
            continue
        total = merged.setdefault(operation.name, [0, 0])
        total[0] += max(0, int(operation.self_nanoseconds))
        total[1] += max(0, int(operation.calls))
        if operation.op_class in op_classes.classes():
            given[operation.name] = operation.op_class
    ordered = sorted(merged.items(), key=lambda item: (-item[1][0], item[0]))
    return [
        agent_pb2.OperationTime(
            name=name,
            op_class=given.get(name) or op_classes.classify(framework, name),
            self_nanoseconds=total // steps,
            calls=calls / steps,
        )
        for name, (total, calls) in ordered
    ]
