"""The numbers a report shows, from a run's rows and raw samples: one summary row per agent
cell (repetitions pooled), per-row statistics recomputed from the samples (so runs stored
before those columns existed get them too), resource figures and the agents' environments."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from fwbench.collector.analysis.contenders import RunData, contenders, samples_by_cell
from fwbench.collector.stats.bootstrap import median_interval
from fwbench.collector.stats.samples import sample_stats
from fwbench.collector.store.cell_key import KEY_COLUMNS, clean
from fwbench.collector.store.interference_columns import interference_unknown

RESOURCE_COLUMNS = (
    "cpu_user_percent",
    "cpu_system_percent",
    "host_iowait_percent",
    "rss_mean_bytes",
    "rss_peak_bytes",
)
GPU_COLUMNS = ("gpu_power_mean_watts", "gpu_energy_joules")


def label_for(agent: str, mode: str, modes_of_agent: int) -> str:
    return f"{agent} ({mode})" if modes_of_agent > 1 and mode else agent


def cell_summary(run: RunData) -> pd.DataFrame:
    """One row per agent, mode and cell key: repetitions, pooled n, median and its 95%
    interval (cluster bootstrap), items per second at the median, and `label` (the agent,
    with its mode when it ran several)."""
    rows = {int(row["cell"]): row for row in run.results.to_dict("records")}
    records = []
    for cell in contenders(run):
        low, high = median_interval(cell.groups)
        per_sample = rows[cell.first_cell].get("items_per_sample")
        if per_sample is None or pd.isna(per_sample):
            per_sample = cell.key.batch_size  # (runs before items_per_sample existed)
        median = cell.median_seconds
        records.append(
            {
                "agent": cell.agent,
                "mode": cell.mode,
                "kind": rows[cell.first_cell].get("kind"),
                **dict(zip(KEY_COLUMNS, cell.key, strict=True)),
                "repetitions": len(cell.groups),
                "n": cell.n,
                "median_seconds": median,
                "ci_low_seconds": low,
                "ci_high_seconds": high,
                "items_per_second": float(per_sample) / median if median > 0 else np.nan,
                "noisy": cell.noisy,
                "cells": cell.cells,
            }
        )
    frame = pd.DataFrame.from_records(records)
    if frame.empty:
        return frame
    modes = frame.groupby("agent")["mode"].nunique()
    frame["label"] = [
        label_for(a, m, int(modes[a])) for a, m in zip(frame["agent"], frame["mode"], strict=True)
    ]
    return frame


def row_statistics(run: RunData) -> pd.DataFrame:
    """Every ok row's statistics, recomputed from its raw samples."""
    by_cell = samples_by_cell(run.samples)
    records = []
    ok = run.results[run.results["status"] == "ok"]
    for row in ok.to_dict("records"):
        seconds = by_cell.get(int(row["cell"]))
        if seconds is None or not seconds.size:
            continue
        stats = sample_stats((seconds * 1e9).round().astype(np.int64).tolist())
        repetition = row.get("repetition")
        records.append(
            {
                "cell": row["cell"],
                "agent": row["agent"],
                "mode": row["mode"],
                "workload": row["workload"],
                "phase": row["phase"],
                "batch_size": row["batch_size"],
                "repetition": 0 if repetition is None or pd.isna(repetition) else repetition,
                "peak_fraction": row.get("peak_fraction"),  # stored: the run's calibration
                "interference": clean(row.get("interference")),  # run/interference.py
                "interference_unknown": interference_unknown(row),
                **stats,
            }
        )
    return pd.DataFrame.from_records(records)


def resource_table(run: RunData) -> pd.DataFrame:
    """Per agent: mean CPU percentages and memory over its ok cells, only the resource
    columns this run has with data (empty when none)."""
    ok = run.results[run.results["status"] == "ok"]
    present = [c for c in RESOURCE_COLUMNS if c in ok and ok[c].notna().any()]
    if not present:
        return pd.DataFrame()
    numbers = ok[["agent", *present]].astype({c: "float64" for c in present})
    aggregations = {c: ("max" if c == "rss_peak_bytes" else "mean") for c in present}
    return numbers.groupby("agent", sort=False).agg(aggregations).reset_index()


def has_gpu_telemetry(run: RunData) -> bool:
    results = run.results
    return any(c in results and results[c].notna().any() for c in GPU_COLUMNS)


def accuracy_curves(run: RunData) -> list[dict[str, Any]]:
    """Per accuracy row: agent, target, and (cumulative training seconds, accuracy) points."""
    curves: list[dict[str, Any]] = []
    results = run.results
    if "accuracy_history" not in results:
        return curves
    for row in results[results["accuracy_history"].notna()].to_dict("records"):
        history = json.loads(row["accuracy_history"])
        seconds = np.cumsum([epoch["train_seconds"] for epoch in history]).tolist()
        accuracy = [epoch["validation_accuracy"] for epoch in history]
        if seconds:
            curves.append(
                {
                    "agent": row["agent"],
                    "mode": row["mode"],
                    "batch_size": row["batch_size"],
                    "target": row.get("target_accuracy"),
                    "seconds": seconds,
                    "accuracy": accuracy,
                }
            )
    return curves


ENVIRONMENT_COLUMNS = (
    "framework",
    "framework_version",
    "variant",
    "plugin_version",
    "libraries",
    "environment",
    "launcher",
    "image",
    "image_id",
    "host",
    "cpu_model",
    "usable_cores",
    "in_container",
    "device_name",
)


def _flat(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, str) and value.startswith("{"):
        try:
            return ", ".join(f"{k} {v}" for k, v in json.loads(value).items())
        except json.JSONDecodeError:
            return value
    return str(value)


def environments(run: RunData) -> pd.DataFrame:
    """One row per agent: what it ran and where (columns this run's schema has)."""
    results = run.results
    columns = [c for c in ENVIRONMENT_COLUMNS if c in results]
    first = results.sort_values("cell").groupby("agent", sort=False).first().reset_index()
    table = first[["agent", *columns]].copy()
    for column in columns:
        table[column] = table[column].map(_flat)
    return table.loc[:, (table != "").any()]
