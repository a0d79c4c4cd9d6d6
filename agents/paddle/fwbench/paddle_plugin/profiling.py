"""A cell's steps under Paddle's own profiler (paddle.profiler, CPU target; protocol 1.10's
RunRequest.profile): every operator's self time on the host, read from the profiler's node
trees, with Paddle's Chrome trace kept beside the run.

Paddle records, per thread, a tree of host events: the Layers' forward ranges (Forward), the
Python bindings that wrap an operator ("conv2d pybind_imperative_func"), the operators
themselves ("conv2d dygraph" in dygraph mode; "pd_op.conv2d", run by the PIR interpreter's
worker threads, in static mode), each holding its infer_meta and kernel launch, the backward
pass's grad nodes ("Global_Conv2dGradNodeFinal"), the optimizer's step ("Optimization Step",
a range paddle.profiler wraps every optimizer's step() in) and the executor's own work
("interpreter_core_run"). An operation here is:

- an operator, named as its kernel is ("conv2d", "add_"; a grad node "Global_MatmulGradNode"
  as the static program names its operator, "matmul_grad"), its infer_meta, node creation
  and kernel launch its own time;
- outside an operator, every other host event but the Layers' ranges and the profile step
  (whose own time is Python between the operations: `outside`): the bindings, the backward
  engine ("backward"), the executor's ranges, under their Paddle names.

Self time is an operation's time less the operations it holds. In static mode the calling
thread waits in interpreter_core_run while the interpreter's threads run the program's
operators: the time another thread spends in an operation is taken off the calling
thread's operations it falls in, so waiting is not counted twice.

Operations under the optimizer's step and under generation's cache writes (a
"fwbench::kv_cache_update" range, run only while a profile is on: `kv_cache_scope`) are named
under them ("Optimization Step/momentum_"), as torch_profile.py names PyTorch's. Only what
starts after a marker range recorded at on_step(0) counts: the warm-up step before it not.
Making a paddle.profiler.Profiler wraps every optimizer class's step() for good, in a check
whether a profile is on: the cells timed after a profile pay that check, one Python call per
step. Imported by the paddle plugin only: it imports paddle."""

from __future__ import annotations

import bisect
import contextlib
import re
import secrets
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paddle
import paddle.profiler as pp

from fwbench.runtime.profiling import OperationSample, ProfiledSteps, RunSteps

PROFILER = f"paddle.profiler (paddle {paddle.version.full_version})"
BEGIN = "fwbench::profiled_steps"  # the marker where the profiled steps begin
KV_CACHE = "fwbench::kv_cache_update"
OPTIMIZER = "Optimization Step"  # paddle.profiler's range around an optimizer's step()
_CONTEXTS = (OPTIMIZER, KV_CACHE)  # ranges whose operations are named under them
_ACTIVE = [False]  # whether a profile is on (kv_cache_scope)
_EVENT = pp.TracerEventType
# Ranges that are not operations: their own time is Python between operations (`outside`).
_TRANSPARENT = frozenset(
    {_EVENT.ProfileStep, _EVENT.Forward, _EVENT.Backward, _EVENT.Dataloader, _EVENT.PythonOp}
)
_INNER_SUFFIXES = (" kernel launch", " infer_meta", " node_creation")
_GRAD_NODE = re.compile(r"Global_(?!Dy2St)(\w+?)GradNode(Final)?")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # MeanAll: mean_all
_KERNEL_LAUNCHES = frozenset({_EVENT.DygraphKernelLaunch, _EVENT.StaticKernelLaunch})


def profile(run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
    """The profiled steps recorded, the warm-up before them not (the profiler runs from
    before it, a marker range at on_step(0) says where the profiled steps begin). Paddle's
    Chrome trace is exported into `trace_dir` when one is asked; the profiler's own default
    (a folder in the working directory) is never written."""

    def on_step(index: int) -> None:
        if index == 0:
            with pp.RecordEvent(BEGIN):
                pass

    profiler = pp.Profiler(targets=[pp.ProfilerTarget.CPU], on_trace_ready=lambda _: None)
    profiler.start()
    _ACTIVE[0] = True
    try:
        run_steps(on_step)
    finally:
        _ACTIVE[0] = False
        profiler.stop()
    result = profiler.profiler_result
    if result is None:
        raise RuntimeError("paddle.profiler recorded nothing")
    operations = list(operations_of(result.get_data()))
    if trace_dir is None:
        return ProfiledSteps(operations)
    trace = trace_dir / f"paddle-{secrets.token_hex(4)}.json"
    profiler.export(str(trace), format="json")
    return ProfiledSteps(operations, str(trace), "chrome-trace")


def kv_cache_scope() -> contextlib.AbstractContextManager[object]:
    """Around a write into a generation's KV cache: a profiler range while a profile is on
    and Paddle runs eagerly; nothing otherwise (the timed steps, and a to_static program,
    whose cache writes run in the interpreter as its other operators: data_movement)."""
    if not _ACTIVE[0] or not paddle.in_dynamic_mode():
        return contextlib.nullcontext()
    return pp.RecordEvent(KV_CACHE)


@dataclass
class _Operation:
    name: str
    start: int
    end: int
    calls: int
    inner: list[_Operation] = field(default_factory=list)  # the operations it holds


def operations_of(trees: dict[int, Any]) -> Iterator[OperationSample]:
    """The operations of the profiler's node trees (thread id -> root node) after the
    marker, one sample each; the runtime adds them up by name."""
    roots = list(trees.values())
    marks = [(i, n) for i, root in enumerate(roots) for n in _walk(root) if n.name == BEGIN]
    if not marks:
        raise RuntimeError(f"paddle.profiler recorded no {BEGIN} marker")
    calling, begin = marks[0][0], int(marks[0][1].start_ns)
    found: list[list[_Operation]] = []
    for root in roots:
        ops: list[_Operation] = []
        _collect(root, "", None, begin, ops)
        found.append(ops)
    # The interpreter's threads' operations, taken off the calling thread's that wait on them.
    others = _Union(op for i, ops in enumerate(found) if i != calling for op in ops)
    for i, ops in enumerate(found):
        for op in ops:
            own = op.end - op.start - sum(o.end - o.start for o in op.inner)
            if i == calling:
                own -= others.within(op) - sum(others.within(o) for o in op.inner)
            yield OperationSample(op.name, max(0, own), op.calls)


class _Union:
    """The union of some operations' time ranges, and how much of it lies in a range."""

    def __init__(self, operations: Iterable[_Operation]) -> None:
        merged: list[list[int]] = []
        for start, end in sorted((op.start, op.end) for op in operations):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self._starts = [start for start, _ in merged]
        self._merged = merged

    def within(self, op: _Operation) -> int:
        first = max(0, bisect.bisect_right(self._starts, op.start) - 1)
        total = 0
        for start, end in self._merged[first:]:
            if start >= op.end:
                break
            total += max(0, min(end, op.end) - max(start, op.start))
        return total


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(current.children_node)


def _collect(
    node: Any, context: str, parent: _Operation | None, begin: int, ops: list[_Operation]
) -> None:
    """The operations under `node` (whose nearest enclosing operation is `parent`)."""
    for child in node.children_node:
        if child.name == BEGIN:
            continue
        operation = None
        if child.start_ns > begin and (parent is None or child.type == _EVENT.Operator):
            operation = _operation(child, context)
        if operation is None:
            _collect(child, context, parent, begin, ops)
            continue
        ops.append(operation)
        if parent is not None:
            parent.inner.append(operation)
        inner = f"{child.name}/" if child.name in _CONTEXTS else context
        _collect(child, inner, operation, begin, ops)


def _operation(node: Any, context: str) -> _Operation | None:
    """The operation a host event is, None for the ranges that are not one."""
    if node.type in _TRANSPARENT:
        return None
    if node.type == _EVENT.PythonUserDefined and node.name not in _CONTEXTS:
        return None
    calls = 1
    if node.type == _EVENT.Operator:
        name = _operator_name(node)
    elif node.type in (_EVENT.OperatorInner, *_KERNEL_LAUNCHES):
        # an operator's parts outside any operator (the backward pass's first gradient)
        name = _strip_suffix(node.name, _INNER_SUFFIXES)
        calls = int(node.type in _KERNEL_LAUNCHES)
    else:
        name = node.name
    return _Operation(f"{context}{name}", node.start_ns, node.end_ns, calls)


def _operator_name(node: Any) -> str:
    """An operator's name as its kernel's: "conv2d dygraph" and "pd_op.conv2d" are conv2d,
    a grad node "Global_Conv2dGradNodeFinal" conv2d_grad (as the static program's gradient
    operator is named)."""
    name = _strip_suffix(str(node.name), (" dygraph", " compute")).removeprefix("pd_op.")
    grad = _GRAD_NODE.fullmatch(name)
    if grad is None:
        return name.removeprefix("Global_")
    return _CAMEL.sub("_", grad.group(1)).lower() + "_grad"


def _strip_suffix(name: str, suffixes: Sequence[str]) -> str:
    for suffix in suffixes:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name
