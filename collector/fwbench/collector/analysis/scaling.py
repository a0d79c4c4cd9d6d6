"""Distributed figures across world sizes (docs/distributed.md): for each agent and cell, the
world's global throughput, per-rank throughput, weak-scaling efficiency against the same
agent's world of one rank at the same per-rank batch, the communication share, and for a
collective the algorithm and bus bandwidth (nccl-tests' definitions).

Efficiency(N) = items/s of N replicas / (N x items/s of one replica, same strategy): 1.0 is
perfect weak scaling for data parallelism (the batch is per replica), and strong scaling for
a pipeline (the batch is the world's: its speed-up over one stage, divided by N). A replica is
a rank, or one of the devices of a rank's process (--world-sizes 1xD: local_devices).
With repetitions, each figure is the median over the repetitions' rows. Given the run's samples,
efficiency has a 95% interval and a verdict against perfect scaling (efficiency.py)."""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import pandas as pd
from rich.table import Table

from fwbench.collector.analysis.efficiency import agent_family, efficiencies, efficiency_text

CELL = ["workload", "phase", "batch_size", "dtype", "mode", "params"]
FIGURES = [
    "median_seconds",
    "items_per_second",
    "communication_share",
    "algbw_bytes_per_second",
    "busbw_bytes_per_second",
    "collective_bytes",
]


def scaling_table(results: pd.DataFrame, samples: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per agent family, cell and world size, with the columns of FIGURES (medians
    over repetitions), per_replica_items_per_second, ranks (the world size), devices (of
    each rank's process), replicas (ranks x devices) and
    scaling_efficiency (NaN where the run has no world of one rank to compare with, or for a
    collective, whose figure is busbw). With `samples` (the run's), the efficiency of a world
    of more than one replica is efficiency.py's, with its interval, Holm-adjusted p,
    processes ("N/1-replica's") and scaling_verdict. Empty when the run has no world rows."""
    if "world_size" not in results:
        return pd.DataFrame()
    rows = results[(results["status"] == "ok") & results["world_size"].notna()].copy()
    if rows.empty:
        return pd.DataFrame()
    rows["family"] = rows["agent"].map(agent_family)
    rows["ranks"] = rows["world_size"].astype(int)
    devices = rows["local_devices"] if "local_devices" in rows else pd.Series(1, rows.index)
    rows["devices"] = pd.to_numeric(devices, errors="coerce").fillna(1).astype(int)
    rows["strategy"] = rows["strategy"].fillna("")
    keys = ["family", *CELL, "strategy", "ranks", "devices"]
    for figure in FIGURES:
        rows[figure] = pd.to_numeric(rows[figure], errors="coerce").astype(float)
    rows["replicas"] = rows["ranks"] * rows["devices"]
    same = ["family", *CELL, "strategy"]
    measured = _efficiency_columns(rows, samples, same)
    grouped = rows.groupby(keys, dropna=False, sort=False)
    table = grouped[FIGURES].median()
    if measured:
        table = table.join(grouped[measured].first())
    table = table.reset_index()
    table["replicas"] = table["ranks"] * table["devices"]
    table["per_replica_items_per_second"] = table["items_per_second"] / table["replicas"]
    single = table[table["replicas"] == 1].set_index(same)["items_per_second"]
    lookup = table.set_index(same).index
    alone = pd.Series(lookup.map(single.to_dict()), index=table.index, dtype=float)
    efficiency = table["items_per_second"] / (table["replicas"] * alone)
    if measured:  # the estimate the interval is centred on, where there is one
        efficiency = table["scaling_efficiency"].astype(float).fillna(efficiency)
    table["scaling_efficiency"] = efficiency.where(table["strategy"] != "collective")
    return table


def _efficiency_columns(
    rows: pd.DataFrame, samples: pd.DataFrame | None, same: list[str]
) -> list[str]:
    """Adds efficiency.py's columns to `rows` (not interfered ones: their CPUs were taken);
    returns their names, none without samples or worlds to compare."""
    if samples is None or "items_per_sample" not in rows:
        return []
    interfered = pd.Series(False, rows.index)
    if "interfered" in rows:
        interfered = rows["interfered"].astype("boolean").fillna(False).astype(bool)
    found = efficiencies(rows[~interfered], samples, same)
    if not found:
        return []
    records = pd.DataFrame.from_dict({i: e.record() for i, e in found.items()}, orient="index")
    for column in records.columns:
        rows[column] = records[column].reindex(rows.index)
    return list(records.columns)


HEADERS = (
    "agent",
    "workload",
    "batch",
    "strategy",
    "ranks",
    "step",
    "items/s",
    "per replica",
    "efficiency",
    "scaling",
    "comm share",
    "message",
    "algbw",
    "busbw",
)
CAPTION = (
    "batch: per replica (data parallel: a rank, or a device of a 1xD process), the world's "
    "(pipeline, tensor; allreduce: 4 KiB units); step: the slowest rank's, per step (median); "
    "items/s: all replicas; efficiency: items/s over replicas x the 1-replica world's of the "
    "same strategy [95% interval; with --repeat 2 or more, over the processes]; scaling: its "
    "verdict against perfect scaling (linear, sub-linear, super-linear or undecided: "
    "docs/distributed.md); comm share: communication the engine could not hide, per step; message: "
    "allreduce bytes per rank; algbw: message / step; busbw: algbw x 2(n-1)/n (nccl-tests)"
)


def _figure(value: object, template: str) -> str:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return "-" if missing else template.format(value)


def _verdict_text(row: Mapping[Hashable, object]) -> str:
    said = row.get("scaling_verdict")
    return said if isinstance(said, str) and said else "-"


def scaling_rows(table: pd.DataFrame) -> list[list[str]]:
    """scaling_table's rows as the text of HEADERS' columns ("-" where a figure means nothing:
    items for a collective, bandwidth for training)."""
    shown = []
    for row in table.to_dict("records"):
        collective = row["strategy"] == "collective"  # items mean nothing there: bandwidth
        items = math.nan if collective else row["items_per_second"]
        per_replica = math.nan if collective else row["per_replica_items_per_second"]
        ranks = str(row["ranks"]) + (f"x{row['devices']}" if row["devices"] > 1 else "")
        shown.append(
            [
                row["family"],
                row["workload"],
                str(row["batch_size"]),
                row["strategy"],
                ranks,
                _figure(row["median_seconds"] * 1e3, "{:.2f} ms"),
                _figure(items, "{:,.0f}"),
                _figure(per_replica, "{:,.0f}"),
                efficiency_text(row),
                _verdict_text(row),
                _figure(row["communication_share"], "{:.0%}"),
                _figure(row["collective_bytes"] / 1024, "{:,.0f} KiB"),
                _figure(row["algbw_bytes_per_second"] / 1e9, "{:.2f} GB/s"),
                _figure(row["busbw_bytes_per_second"] / 1e9, "{:.2f} GB/s"),
            ]
        )
    return shown


def world_table(
    results: pd.DataFrame, title: str, samples: pd.DataFrame | None = None
) -> Table | None:
    """The run's distributed figures as a table to print (with the run's samples, efficiency
    with its interval and verdict); None for a run without worlds."""
    table = scaling_table(results, samples)
    if table.empty:
        return None
    shown = Table(title=title, caption=CAPTION)
    for header in HEADERS:
        shown.add_column(header, justify="left" if header in ("agent", "workload") else "right")
    for cells in scaling_rows(table):
        shown.add_row(*cells)
    return shown
