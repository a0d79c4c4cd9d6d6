"""A cell's steps under TensorFlow's profiler (tf.profiler.experimental, protocol 1.10's
RunRequest.profile), for the plugins that run on TensorFlow on the CPU (TensorFlow's, Keras'
on its tensorflow backend). The profiler writes an XSpace (read with TensorFlow's own
xplane_pb2); the operations are:

- a graph's kernels (tf.function), events "NODE:TYPE" on the executor's threads: named by
  their TYPE ("MatMul", "_FusedConv2D", "ResourceApplyMomentum");
- eager ops, events "EagerLocalExecute: TYPE" on the calling thread (their kernel and its
  eager dispatch: TensorFlow records no kernel event of its own there);
- in the xla mode, XLA:CPU's thunks, named and classed as JAX's (xplane.xla_name, the
  mapping's "xla" names; TensorFlow keeps no program text to look into opaque fusions);
- the executors' own work around them (ExecutorState::Process, the thunk executor):
  `framework`.

A call of a function (a kernel or eager op of type __inference_...) only waits for the
function's own kernels: it is not an operation. Imported only by those plugins: it imports
tensorflow."""

from __future__ import annotations

from pathlib import Path

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from fwbench.runtime import xplane
from fwbench.runtime.profiling import ProfiledSteps, RunSteps
from fwbench.spec import op_classes

PROFILER = f"tf.profiler (tensorflow {tf.__version__})"
_EAGER = "EagerLocalExecute: "
_EXECUTORS = ("ExecutorState::Process", xplane.XLA_EXECUTOR)
_FUNCTIONS = ("__inference_", "__forward_", "__backward_")
_FRAMEWORK = "framework"


def profile(run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
    """The profiled steps recorded, the warm-up step before them not (a Trace range at
    on_step(0) marks where they begin)."""

    def on_step(index: int) -> None:
        if index == 0:
            with tf.profiler.experimental.Trace(xplane.MARKER):
                pass

    # TensorFlow's defaults: its kernels and runtime; no Python calls (time "outside").
    profiler = (tf.profiler.experimental.start, tf.profiler.experimental.stop)
    return xplane.recorded(profiler, lambda: run_steps(on_step), _read, trace_dir, "tensorflow")


def operation(name: str, hlo_op: str) -> tuple[str, str]:
    """An event's operation and, where TensorFlow's names are not the event's, its class;
    ("", "") for an event that is no operation."""
    if hlo_op:
        xla = xplane.xla_name(hlo_op)
        return xla, op_classes.classify("xla", xla)
    if name in _EXECUTORS or name.startswith(xplane.XLA_THUNK_END):
        return xplane.xla_name(name), _FRAMEWORK
    if name.startswith(_EAGER):
        kind = name.removeprefix(_EAGER)
    elif ":" in name and "::" not in name:  # "NODE:TYPE", not a C++ scope's event
        kind = name.rsplit(":", 1)[1]
    else:
        return "", ""
    if not kind or kind.startswith(_FUNCTIONS) or " " in kind:
        return "", ""
    return kind, ""


def _read(found: Path) -> tuple[list[xplane.Event], float]:
    """The host plane's operations, and where the profiled steps begin."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(found.read_bytes())
    events: list[xplane.Event] = []
    marks: list[tuple[str, float]] = []
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for number, line in enumerate(plane.lines):
            key = f"{plane.name}/{number}"
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                start = line.timestamp_ns + event.offset_ps / 1000
                if name == xplane.MARKER:
                    marks.append((name, start))
                    continue
                hlo_op = next(
                    (
                        _text(plane, s)
                        for s in event.stats
                        if stat_names.get(s.metadata_id) == "hlo_op"
                    ),
                    "",
                )
                kind, op_class = operation(name, hlo_op)
                if kind:
                    events.append(
                        xplane.Event(key, kind, start, event.duration_ps / 1000, op_class)
                    )
    return events, xplane.begin_of(marks)


def _text(plane: xplane_pb2.XPlane, stat: xplane_pb2.XStat) -> str:
    """A string stat's value, held in place or by reference to the plane's stat metadata."""
    if stat.HasField("ref_value"):
        return str(plane.stat_metadata[stat.ref_value].name)
    return str(stat.str_value)
