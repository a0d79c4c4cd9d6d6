"""A cell's steps under OpenVINO's own profiler, its performance counters (PERF_COUNT;
protocol 1.10's RunRequest.profile). Counters are a compile-time property, so the cell's
model is compiled a second time with them on, and the cell's bound request runs a request of
that compilation, on the same inputs, while the profile lasts: the timed compilation stays
as it was.

The CPU plugin's counter of a node is its average time over every inference its graph ran
since it was compiled, each inference's time cut to whole microseconds (PerfCount: total
microseconds over runs, reported as real_time and as cpu_time alike). So the counters are
read twice, outside the timed steps: at on_step(0), after the warm-up, and after the last
step; a node's time over the profiled steps is runs x average at the end less runs x average
at on_step(0). That is exact but for the cut microseconds: under one microsecond per node
per step, spread over the steps (fewer steps, more of it), and a node faster than a
microsecond counts nothing. A fresh compilation's first inferences are slower (its memory and
caches cold), so the profile runs two inferences of its own before the runtime's warm-up.
The graph is one per stream, so a compilation with several streams ("throughput" on more
than one core) spreads a request's inferences over graphs whose counters cannot be told
apart: it answers not profiled, and why.

An operation is a node of the CPU plugin's executed graph, after its own fusions, named by
its type ("Convolution", "FullyConnected", "MVN", "Reorder", ...). A node that fused others
hides them: a Convolution or FullyConnected holds its fused bias and activation. A
"Subgraph" is a kernel OpenVINO's Snippets compiled from several of the model's operations,
so it is named with their types ("Subgraph[Add,MatMul,Multiply,Softmax,Transpose]", from
the runtime model's originalLayersNames): the mapping classes a whole attention fused into
one Subgraph as attention, one holding a MatMul as matmul, the rest as elementwise. Nodes
that did not run (fused away, Parameter, Result, an in-place Reshape) are left out. OpenVINO
writes no trace file of its own: none is kept.

The plugin's graph cells and model files profile; generate does not (its prefill and decode
requests are bound into the steps it hands the runtime)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import openvino as ov

from fwbench.openvino_plugin import compiled
from fwbench.runtime.profiling import OperationSample, ProfiledSteps, RunSteps

PROFILER = f"OpenVINO performance counters (openvino {compiled.version()}, CPU device)"
NOT_PROFILED = (
    "OpenVINO profiles the catalogue's graph cells and model files only, not generate (its "
    "prefill and decode requests are bound into its steps)"
)
STREAMS_REASON = (
    "OpenVINO's counters average each stream's graph over its own inferences and this "
    "compilation has {streams} streams, among which a request's inferences move: profiled "
    "with one stream only (mode latency, or one core)"
)
WARM_UP = 2  # the profile's own inferences of its fresh compilation, before the runtime's
_EXECUTED = ov.ProfilingInfo.Status.EXECUTED
_SUBGRAPH = "Subgraph"
_GENERATED_NAME = re.compile(r"([A-Za-z]+)_\d+")  # a node a transformation made: Multiply_4816


@dataclass(frozen=True)
class Profilable:
    """A cell's bound request, and how its model is compiled: the model read and reshaped
    anew (the timed compilation keeps nothing of it), the cell's mode and threads."""

    bound: compiled.BoundRequest
    model: Callable[[], ov.Model]
    mode: str
    threads: int


def profile(cell: Profilable | None, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
    if cell is None:
        raise RuntimeError(NOT_PROFILED)
    model = cell.model()
    program = compiled.compile_for(model, cell.mode, cell.threads, profiling=True)
    streams = int(program.get_property("NUM_STREAMS"))
    if streams != 1:
        raise RuntimeError(STREAMS_REASON.format(streams=streams))
    names = operation_names(program, model)
    request = program.create_infer_request()
    before: dict[str, tuple[str, int]] = {}
    steps = [0]

    def on_step(index: int) -> None:
        if index == 0:
            before.update(_averages(request))
        steps[0] = index

    with cell.bound.running_on(request):
        for _ in range(WARM_UP):
            request.infer()
        run_steps(on_step)
    after = _averages(request)
    runs = WARM_UP + 1  # the inferences before on_step(0): its own and the runtime's warm-up
    totals: dict[str, list[int]] = {}
    for node, (kind, average) in after.items():
        earlier = before.get(node, (kind, 0))[1]
        microseconds = max(0, (runs + steps[0]) * average - runs * earlier)
        total = totals.setdefault(names.get(node, kind), [0, 0])
        total[0] += microseconds * 1000
        total[1] += steps[0]
    return ProfiledSteps([OperationSample(n, t, calls) for n, (t, calls) in totals.items()])


def _averages(request: ov.InferRequest) -> dict[str, tuple[str, int]]:
    """Each node that ran: its type and its average microseconds so far."""
    return {
        info.node_name: (info.node_type, info.real_time // timedelta(microseconds=1))
        for info in request.get_profiling_info()
        if info.status == _EXECUTED
    }


def operation_names(program: ov.CompiledModel, model: ov.Model) -> Mapping[str, str]:
    """The Subgraph nodes of the compiled program by name, each named with the types of the
    model's operations it fused; the other nodes are named by their type."""
    types = {op.get_friendly_name(): op.get_type_name() for op in model.get_ops()}
    names = {}
    for op in program.get_runtime_model().get_ops():
        info = op.get_rt_info()
        if str(info["layerType"].astype(str)) != _SUBGRAPH:
            continue
        fused = str(info["originalLayersNames"].astype(str)).split(",")
        kinds = {types.get(name) or _generated_type(name) for name in fused if name}
        kinds -= {"", "Constant"}
        names[op.get_friendly_name()] = f"{_SUBGRAPH}[{','.join(sorted(kinds))}]"
    return names


def _generated_type(name: str) -> str:
    found = _GENERATED_NAME.fullmatch(name)
    return found.group(1) if found else ""
