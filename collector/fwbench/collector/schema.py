"""The results table: one row per (run, agent, workload cell), a fixed and versioned set of
columns. docs/results-schema.md is generated from COLUMNS (`collector schema`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

# 2 (fwbench 0.2): settings, items_per_sample and the accuracy columns; version 1 rows load
# with those columns empty.
SCHEMA_VERSION = 2
STATUSES = ("ok", "failed", "unsupported", "cancelled")


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # pandas dtype
    description: str


COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "Int64", "Version of this table's schema"),
    Column("run_id", "string", "Run identifier (also the run's folder name)"),
    Column("cell", "Int64", "Index of the cell within the run, in execution order"),
    Column("launcher", "string", "How the agent was started: local or attached"),
    Column("agent", "string", "Agent name (manifest name)"),
    Column("address", "string", "gRPC address the collector used"),
    Column("framework", "string", "Framework the agent runs (torch, tensorflow, jax)"),
    Column("framework_version", "string", "Framework version as the agent reports it"),
    Column("variant", "string", "Build variant (cpu, cu12, mkl, eigen, ...)"),
    Column("plugin_version", "string", "Version of the agent's framework plugin"),
    Column("libraries", "string", "JSON object of library versions (BLAS, oneDNN, CUDA, cuDNN)"),
    Column("environment", "string", "JSON object of environment switches in effect"),
    Column("device", "string", "Device the step ran on, e.g. cpu or cuda:0"),
    Column("device_name", "string", "Device model (CPU model or GPU name)"),
    Column("host", "string", "Hostname of the agent"),
    Column("cpu_model", "string", "CPU model of the agent's host"),
    Column("usable_cores", "Int64", "CPU cores in the agent's affinity mask"),
    Column("in_container", "boolean", "Whether the agent ran inside a container"),
    Column("workload", "string", "Catalogue workload name"),
    Column("kind", "string", "op, model or accuracy"),
    Column("phase", "string", "train (forward, backward, optimizer step) or infer"),
    Column("batch_size", "Int64", "Items per step"),
    Column("dtype", "string", "Data type actually used"),
    Column(
        "mode",
        "string",
        "Execution mode actually used (torch eager/compile, tensorflow function/xla/eager, "
        "jax jit); on rows that did not run, the mode asked for (empty = agent default)",
    ),
    Column("layout", "string", "Data layout (NCHW, NHWC) where it applies"),
    Column("intra_op_threads", "Int64", "Intra-op threads in effect"),
    Column("inter_op_threads", "Int64", "Inter-op threads in effect"),
    Column("threads_requested", "Int64", "Intra-op threads requested, 0 = agent default"),
    Column("params", "string", "JSON object of the workload's shape parameters"),
    Column(
        "settings",
        "string",
        "JSON object of framework facts that decide fairness, as the agent reports them "
        "(oneDNN on/off, TF32, autocast or dtype policy, compiler backend, XLA)",
    ),
    Column("seed", "Int64", "Seed of synthetic inputs and weights"),
    Column("n", "Int64", "Number of timed samples"),
    Column("median_seconds", "Float64", "Median step time"),
    Column("mean_seconds", "Float64", "Mean step time"),
    Column("stdev_seconds", "Float64", "Sample standard deviation of step time"),
    Column("min_seconds", "Float64", "Fastest step"),
    Column("max_seconds", "Float64", "Slowest step"),
    Column("p5_seconds", "Float64", "5th percentile of step time"),
    Column("p95_seconds", "Float64", "95th percentile of step time"),
    Column("cv", "Float64", "Coefficient of variation (stdev / mean)"),
    Column(
        "items_per_sample",
        "Int64",
        "Items one sample covers: batch_size for a step; a whole epoch for accuracy workloads",
    ),
    Column("items_per_second", "Float64", "items_per_sample / median_seconds"),
    Column("flops_per_item", "Float64", "FLOPs of one item for this phase (catalogue formula)"),
    Column("gflops_per_second", "Float64", "Achieved GFLOP/s at the median step time"),
    Column("first_iteration_seconds", "Float64", "First step, timed alone (set-up, compile)"),
    Column("build_seconds", "Float64", "Building model, inputs and optimizer (untimed)"),
    Column("warmup_iterations", "Int64", "Discarded iterations after the first"),
    Column("measure_started_at", "datetime64[ns, UTC]", "Wall-clock start of the timed loop"),
    Column("measure_ended_at", "datetime64[ns, UTC]", "Wall-clock end of the timed loop"),
    Column("target_accuracy", "Float64", "Accuracy workloads: target validation accuracy"),
    Column("reached_target", "boolean", "Accuracy workloads: whether the target was reached"),
    Column(
        "time_to_target_seconds",
        "Float64",
        "Accuracy workloads: training time (evaluation excluded, epoch 1 included) to target",
    ),
    Column("epochs_to_target", "Int64", "Accuracy workloads: epoch that reached the target"),
    Column("epochs", "Int64", "Accuracy workloads: epochs run"),
    Column("final_accuracy", "Float64", "Accuracy workloads: validation accuracy at the end"),
    Column(
        "accuracy_history",
        "string",
        "Accuracy workloads: JSON list of {epoch, train_seconds, eval_seconds, "
        "validation_accuracy}",
    ),
    Column("status", "string", "ok, failed, unsupported or cancelled"),
    Column("error_code", "string", "gRPC status code name when not ok"),
    Column("error", "string", "One-line reason when not ok"),
)
COLUMN_NAMES = tuple(c.name for c in COLUMNS)


def to_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Rows (dicts) as a table with exactly the schema's columns, order and dtypes; missing
    values become NA, unknown keys are an error."""
    records = list(rows)
    for row in records:
        unknown = set(row) - set(COLUMN_NAMES)
        if unknown:
            raise KeyError(f"not in results schema v{SCHEMA_VERSION}: {sorted(unknown)}")
    frame = pd.DataFrame.from_records(records, columns=list(COLUMN_NAMES))
    for column in COLUMNS:
        if column.dtype.startswith("datetime"):
            # to_datetime picks its unit from the data; the schema fixes it.
            stamps = pd.to_datetime(frame[column.name], utc=True)
            frame[column.name] = stamps.astype(column.dtype)  # type: ignore[call-overload]
        else:
            frame[column.name] = frame[column.name].astype(column.dtype)  # type: ignore[call-overload]
    return frame


def schema_markdown() -> str:
    lines = [
        f"# Results table schema, version {SCHEMA_VERSION}",
        "",
        "One row per agent and workload cell. Generated by `collector schema`; do not edit.",
        "",
        "| column | type | meaning |",
        "| --- | --- | --- |",
    ]
    lines += [f"| `{c.name}` | {c.dtype} | {c.description} |" for c in COLUMNS]
    return "\n".join(lines) + "\n"
