"""The report's per-process statistics table: each process's samples in each cell, in
milliseconds, with its flags (noisy, interfered)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report import data
from fwbench.collector.store.interference_columns import UNKNOWN


def _number(value: Any, template: str = "{:.4g}") -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    return template.format(value)


def statistics_rows(run: RunData) -> list[list[str]]:
    """One row of STATISTICS_HEADERS per process and cell: its samples' statistics (ms)."""
    stats = data.row_statistics(run)
    rows = []
    for row in stats.to_dict("records"):
        rows.append(
            [
                str(row["cell"]),
                str(row["agent"]),
                str(row["mode"]),
                f"{row['workload']} {row['phase']} bs={row['batch_size']}",
                str(row["repetition"]),
                str(row["n"]),
                _number(row["median_seconds"] * 1e3, "{:.3f}"),
                f"[{row['median_ci_low_seconds'] * 1e3:.3f}, "
                f"{row['median_ci_high_seconds'] * 1e3:.3f}]",
                _number(row["mean_seconds"] * 1e3, "{:.3f}"),
                _number(row["p5_seconds"] * 1e3, "{:.3f}"),
                _number(row["p95_seconds"] * 1e3, "{:.3f}"),
                _number(row["p99_seconds"] * 1e3, "{:.3f}"),
                _number(row["cv"] * 100, "{:.1f}%"),
                str(row["outliers"]),
                _number(row["peak_fraction"], "{:.1%}"),
                ", ".join(
                    flag
                    for flag in (
                        "noisy" if row["noisy"] else "",
                        f"interfered: {row['interference']}" if row.get("interference") else "",
                        UNKNOWN if row.get("interference_unknown") else "",
                    )
                    if flag
                ),
            ]
        )
    return rows


STATISTICS_HEADERS = [
    "cell",
    "agent",
    "mode",
    "workload",
    "rep",
    "n",
    "median ms",
    "95% CI ms",
    "mean ms",
    "p5 ms",
    "p95 ms",
    "p99 ms",
    "CV",
    "outliers",
    "% peak",
    "flag",
]
