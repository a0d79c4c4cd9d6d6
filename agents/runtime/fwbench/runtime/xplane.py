"""The framework-neutral part of reading an XSpace profile (the `*.xplane.pb` that
TensorFlow's and JAX's profilers write, protocol 1.10's RunRequest.profile): each operation's
self time from events on timelines, and XLA's operation names. tf_profile.py and
jax_profile.py read their framework's file into `Event`s; this module imports no framework.

Self time is an event's duration less the events nested inside it on the same line (a thread's
timeline): only the events a reader hands over count, as operations or as their parents'
children. Events that start before the marker (MARKER, a range the reader records at
on_step(0)) belong to the warm-up step and are left out.

XLA:CPU runs a compiled program as thunks, one per HLO instruction left after its fusions,
each a profiler event named as the instruction ("dot.3", "multiply_add_fusion.13",
"ynn_fusion.7"). `xla_name` drops the instruction's number, so that one kind of thunk is one
operation, and names a fusion whose name says nothing of its contents ("ynn_fusion": a
YNNPACK fusion of a dot, a reduction or a pooling) by the heaviest instruction it fuses, where
the program's HLO text is at hand (`fusion_contents`): "ynn_fusion[dot]"."""

from __future__ import annotations

import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fwbench.runtime.profiling import OperationSample, ProfiledSteps

MARKER = "fwbench::profiled_steps"  # the range recorded at on_step(0)
XLA_EXECUTOR = "ThunkExecutor::Execute"  # XLA:CPU's thunk executor, around its thunks
XLA_THUNK_END = "end: "  # the executor's work after a thunk ("end: dot.3")
XLA_THUNK_END_NAME = "ThunkExecutor::end"  # those events, as one operation
# Fusions named after no instruction they hold: named by their contents, where known.
_OPAQUE_FUSION = re.compile(r"(ynn|xnn|onednn)?_?fusion")
# The instructions that decide a fusion's kind, the heaviest first.
_HEAVY = ("convolution", "dot", "reduce-window", "select-and-scatter", "reduce", "scatter")
_NUMBER = re.compile(r"\.\d+$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*.*?\s([a-z][a-z0-9\-]*)\((.*)$")
_COMPUTATION = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")


@dataclass(frozen=True)
class Event:
    """One event of a profile: `line` names its timeline, times in nanoseconds on one clock
    for every line. `name` is the operation it counts as ("" for one that only nests)."""

    line: str
    name: str
    start_ns: float
    duration_ns: float
    op_class: str = ""


def self_times(events: Iterable[Event], begin_ns: float) -> list[OperationSample]:
    """Each named event's self time (its duration less the time of the events nested in it on
    its line, clipped to it), added up by name and class; events starting before `begin_ns`
    are left out, as the events that only nest (no name)."""
    by_line: dict[str, list[Event]] = {}
    for event in events:
        if event.start_ns >= begin_ns and event.duration_ns >= 0:
            by_line.setdefault(event.line, []).append(event)
    totals: dict[tuple[str, str], list[float]] = {}
    for line in by_line.values():
        for event, inner in _nested(line):
            if not event.name:
                continue
            total = totals.setdefault((event.name, event.op_class), [0.0, 0])
            total[0] += max(0.0, event.duration_ns - inner)
            total[1] += 1
    return [
        OperationSample(name, round(time), int(calls), op_class)
        for (name, op_class), (time, calls) in totals.items()
    ]


@dataclass
class _Open:
    event: Event
    end: float
    inner: float = 0.0


def _nested(line: list[Event]) -> Iterable[tuple[Event, float]]:
    """Each event of one line with the time of its direct children inside it."""
    line.sort(key=lambda e: (e.start_ns, -e.duration_ns))
    stack: list[_Open] = []
    for event in line:
        end = event.start_ns + event.duration_ns
        while stack and stack[-1].end <= event.start_ns:
            done = stack.pop()
            yield done.event, done.inner
        if stack:
            stack[-1].inner += min(end, stack[-1].end) - event.start_ns
        stack.append(_Open(event, end))
    while stack:
        done = stack.pop()
        yield done.event, done.inner


def begin_of(events: Iterable[tuple[str, float]]) -> float:
    """Where the profiled steps begin: the first MARKER among (name, start) pairs; 0 when
    there is none (then nothing is left out)."""
    marks = [start for name, start in events if name == MARKER]
    return min(marks) if marks else 0.0


def xla_name(hlo_op: str, contents: Mapping[str, str] | None = None) -> str:
    """A thunk's operation: its instruction's name less the number ("fusion.3": "fusion"),
    a fusion that names nothing by the heaviest instruction it holds where `contents` (from
    fusion_contents) knows it ("ynn_fusion.7": "ynn_fusion[dot]")."""
    if hlo_op.startswith(XLA_THUNK_END):
        return XLA_THUNK_END_NAME
    stem = _NUMBER.sub("", hlo_op)
    kind = (contents or {}).get(hlo_op, "")
    if kind and _OPAQUE_FUSION.fullmatch(stem):
        return f"{stem}[{kind}]"
    return stem


def fusion_contents(hlo_text: str) -> dict[str, str]:
    """For each fusion of an HLO module's text (HloModule.to_string), the heaviest of the
    instructions its computation holds (_HEAVY), "" when it holds none of them."""
    opcodes: dict[str, set[str]] = {}
    calls: dict[str, str] = {}
    computation = ""
    for text in hlo_text.splitlines():
        found = _COMPUTATION.match(text)
        if found and " = " not in text:
            computation = found.group(1)
            continue
        instruction = _INSTRUCTION.match(text)
        if instruction is None:
            continue
        name, opcode, rest = instruction.groups()
        opcodes.setdefault(computation, set()).add(opcode)
        called = _CALLS.search(rest)
        if opcode == "fusion" and called:
            calls[name] = called.group(1)
    return {
        name: next((op for op in _HEAVY if op in opcodes.get(called, ())), "")
        for name, called in calls.items()
    }


def recorded(
    profiler: tuple[Callable[[str], None], Callable[[], None]],
    run: Callable[[], None],
    read: Callable[[Path], tuple[list[Event], float]],
    trace_dir: Path | None,
    names: str,
) -> ProfiledSteps:
    """`run` under a profiler (its start into a folder, its stop) that writes an XSpace, read
    into events by `read` (with where the profiled steps begin): the operations' self times,
    and the XSpace kept in trace_dir as NAMES-RANDOM-HOST.xplane.pb where one is asked."""
    start, stop = profiler
    logdir = Path(tempfile.mkdtemp(prefix=f"fwbench-{names}-"))
    try:
        start(str(logdir))
        try:
            run()
        finally:
            stop()
        found = sorted(logdir.rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
        if not found:
            raise RuntimeError(f"the profiler wrote no .xplane.pb under {logdir}")
        operations = self_times(*read(found[-1]))
        if trace_dir is None:
            return ProfiledSteps(operations, names=names)
        kept = trace_dir / f"{names}-{secrets.token_hex(4)}-{found[-1].name}"
        shutil.copyfile(found[-1], kept)
        return ProfiledSteps(operations, str(kept), "xplane", names=names)
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def no_profiler(profiler: str, on_gpu: bool, in_world: bool) -> str:
    """Why a plugin whose profiler writes an XSpace profiles nothing, "" where it profiles
    (one process, on the CPU: the host plane is what is read)."""
    if in_world:
        return (
            f"{profiler} is not read for a rank of a world: each rank's profile would hold "
            "its own process only, the collectives' waits among its operations"
        )
    if on_gpu:
        return f"{profiler} is read on the CPU only (not a GPU's device planes yet)"
    return ""
