"""The results table's columns for a profiled cell (`collector run --profile`, protocol 1.10):
the steps its agent ran under its framework's profiler after the timed loop, in the common
classes of operations (fwbench/spec/op_classes.toml, docs/profiling.md); empty on every row
not profiled. Times are per step, in seconds."""

from __future__ import annotations

from fwbench.collector.store.columns_base import Column

PROFILE_COLUMNS: tuple[Column, ...] = (
    Column(
        "profiler",
        "string",
        "Profile: the framework's profiler that ran the cell's profiled steps, with its version",
    ),
    Column("profile_steps", "Int64", "Profile: steps run under the profiler after the timed loop"),
    Column(
        "profile_step_seconds",
        "Float64",
        "Profile: wall time of one profiled step (the profiler on, the device synchronized)",
    ),
    Column(
        "profile_effect",
        "Float64",
        "Profile: profile_step_seconds / median_seconds, how much profiling stretched the step "
        "(1 = not at all)",
    ),
    Column(
        "profile_coverage",
        "Float64",
        "Profile: the share of the profiled step that is classed, the time outside every "
        "operation included: all but the unmapped operations' time",
    ),
    Column(
        "profile_classes",
        "string",
        "Profile: JSON {class: seconds per step}: the operations' self times by common class, "
        '"outside" the step\'s time outside every operation, "unmapped" the names no rule '
        "maps",
    ),
    Column(
        "profile_operations",
        "string",
        "Profile: JSON list of [name, class, self seconds per step, calls per step] for every "
        'operation the profiler saw, largest first (class "" where the mapping has none)',
    ),
    Column(
        "profile_trace",
        "string",
        "Profile: the profiler's own trace file (relative to the run folder where it is in it), "
        "for the framework's tools, Perfetto or chrome://tracing",
    ),
    Column(
        "profile_note",
        "string",
        "Profile: why a cell asked to be profiled was not (the agent has no profiler, its "
        "protocol predates profiles, the profiler failed), or where its trace stayed",
    ),
)
