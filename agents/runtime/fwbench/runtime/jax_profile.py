"""A cell's steps under JAX's profiler (jax.profiler, protocol 1.10's RunRequest.profile), for
the plugins that run on JAX on the CPU (jax's, Keras' on its jax backend). The profiler
writes an XSpace; XLA:CPU's thunks (one per HLO instruction left after fusion) are the
operations, named as xplane.xla_name says, their self time on the thread that ran them; the
thunk executor's own work between them is `framework`. Python and jax's dispatch on the
calling thread are left to `outside`. Imported only by those plugins: it imports jax."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import jax
import jax.extend.backend
import jax.profiler

from fwbench.runtime import xplane
from fwbench.runtime.profiling import ProfiledSteps, RunSteps

PROFILER = f"jax.profiler (jax {jax.__version__})"
_FRAMEWORK = "framework"


def profile(run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
    """The profiled steps recorded, the warm-up step before them not (a TraceAnnotation at
    on_step(0) marks where they begin)."""

    def on_step(index: int) -> None:
        if index == 0:
            with jax.profiler.TraceAnnotation(xplane.MARKER):
                pass

    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python's calls: the steps' own time, "outside"

    def start(logdir: str) -> None:
        jax.profiler.start_trace(logdir, profiler_options=options)

    def read(found: Path) -> tuple[list[xplane.Event], float]:
        return _read(jax.profiler.ProfileData.from_file(str(found)), _contents())

    profiler = (start, jax.profiler.stop_trace)
    return xplane.recorded(profiler, lambda: run_steps(on_step), read, trace_dir, "xla")


def _contents() -> dict[tuple[str, str], str]:
    """Every live executable's fusions with what they hold (xplane.fusion_contents), by
    module and instruction name; where two programs of one name disagree, none."""
    found: dict[tuple[str, str], str] = {}
    clash: set[tuple[str, str]] = set()
    for executable in jax.extend.backend.get_backend("cpu").live_executables():
        for module in executable.hlo_modules():
            for name, kind in xplane.fusion_contents(module.to_string()).items():
                if found.setdefault((module.name, name), kind) != kind:
                    clash.add((module.name, name))
    return {key: kind for key, kind in found.items() if key not in clash}


def _read(
    data: jax.profiler.ProfileData, contents: Mapping[tuple[str, str], str]
) -> tuple[list[xplane.Event], float]:
    """The host plane's thunks and executor events, and where the profiled steps begin."""
    events: list[xplane.Event] = []
    marks: list[tuple[str, float]] = []
    for plane in data.planes:
        if not plane.name.startswith("/host:"):
            continue
        for number, line in enumerate(plane.lines):
            key = f"{plane.name}/{number}"
            for event in line.events:
                name = event.name
                if name == xplane.MARKER:
                    marks.append((name, event.start_ns))
                    continue
                stats = dict(event.stats)
                if "hlo_op" in stats:
                    hlo_op = str(stats["hlo_op"])
                    kind = contents.get((str(stats.get("hlo_module", "")), hlo_op), "")
                    operation, op_class = xplane.xla_name(hlo_op, {hlo_op: kind}), ""
                elif name == xplane.XLA_EXECUTOR or name.startswith(xplane.XLA_THUNK_END):
                    operation, op_class = xplane.xla_name(name), _FRAMEWORK
                else:
                    continue
                events.append(
                    xplane.Event(key, operation, event.start_ns, event.duration_ns, op_class)
                )
    return events, xplane.begin_of(marks)
