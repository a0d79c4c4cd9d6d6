"""A cell's steps under PyTorch's profiler (torch.profiler, protocol 1.10's RunRequest.profile),
for the plugins that run on PyTorch (torch's, Keras' on its torch backend): every operation's
self time on the CPU, and on a GPU its kernels' device time, with the profiler's own Chrome
trace kept beside the run. Imported only by those plugins: it imports torch.

Operations the optimizer runs (its step and zero_grad are record_function ranges named
"Optimizer.step#SGD.step") are named under that range, "Optimizer.step#SGD.step/aten::add_":
they update the weights, and the mapping (fwbench/spec/op_classes.toml) classes them so; the
same aten::add_ in the model's own step stays elementwise. Eager generation's writes into its
KV cache are named under "fwbench::kv_cache_update" the same way, while the profiler runs
only (`kv_cache_scope`: outside a profile the timed steps run no range at all)."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable
from pathlib import Path

import torch
from torch.autograd.profiler_util import FunctionEvent

from fwbench.runtime.profiling import OperationSample, ProfiledSteps, RunSteps

PROFILER = f"torch.profiler (torch {torch.__version__})"
# record_function ranges whose operations are named under them
_CONTEXTS = ("Optimizer.", "fwbench::kv_cache")
_ACTIVE = [False]  # whether a profile is on (kv_cache_scope)
_BEGIN = "fwbench::profiled_steps"  # the marker where the profiled steps begin


def profile(run_steps: RunSteps, trace_dir: Path | None, device: torch.device) -> ProfiledSteps:
    """The profiled steps recorded, the warm-up step before them not: the profiler runs from
    before the warm-up step (its own start-up in that step), a marker range at on_step(0)
    says where the profiled steps begin, and only what starts after it counts. No per-step
    call into the profiler (its schedule's step() took 0.4 ms a step here, more than a LeNet
    inference step)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)

    def on_step(index: int) -> None:
        if index == 0:
            with torch.profiler.record_function(_BEGIN):
                pass

    with profiler(activities=activities) as found:
        _ACTIVE[0] = True
        try:
            run_steps(on_step)
        finally:
            _ACTIVE[0] = False
    operations = list(_operations(found.events(), device.type == "cuda"))
    if trace_dir is None:
        return ProfiledSteps(operations, names="torch")
    trace = trace_dir / f"torch-{secrets.token_hex(4)}.json"
    found.export_chrome_trace(str(trace))
    return ProfiledSteps(operations, str(trace), "chrome-trace", names="torch")


def kv_cache_scope() -> contextlib.AbstractContextManager[object]:
    """Around a write into a generation's KV cache: a profiler range while a profile is on,
    nothing otherwise, and nothing in a compiled step (which the range would recompile)."""
    if torch.compiler.is_compiling() or not _ACTIVE[0]:
        return contextlib.nullcontext()
    scope: contextlib.AbstractContextManager[object]
    scope = torch.profiler.record_function("fwbench::kv_cache_update")
    return scope


def _operations(events: Iterable[FunctionEvent], cuda: bool) -> Iterable[OperationSample]:
    """One sample per event (the runtime adds them up by name). On a GPU an operation's time
    is its kernels' self time on the device where it has any, else its CPU self time."""
    events = list(events)
    marks = [e.time_range.start for e in events if e.name == _BEGIN]
    begin = marks[0] if marks else 0
    for event in events:
        if event.name == _BEGIN or event.time_range.start < begin:
            continue  # the marker, and the warm-up step before it
        microseconds = event.self_cpu_time_total
        if cuda and event.self_device_time_total > 0:
            microseconds = event.self_device_time_total
        yield OperationSample(_name(event), int(microseconds * 1000), 1)


def _name(event: FunctionEvent) -> str:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(_CONTEXTS):
            return f"{parent.name}/{event.name}"
        parent = parent.cpu_parent
    return str(event.name)
