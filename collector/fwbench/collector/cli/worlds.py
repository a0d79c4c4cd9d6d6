"""`collector run --world-sizes`: the world sizes a user asked for, checked before anything
starts (docs/distributed.md)."""

from __future__ import annotations

import math

import pandas as pd
from rich.table import Table

from fwbench.collector.agents.specs import (
    DEVICES_SEPARATOR,
    MAX_LOCAL_DEVICES,
    MAX_WORLD_SIZE,
    world_size_of,
)
from fwbench.collector.analysis.scaling import scaling_table
from fwbench.collector.run.plan import SelectionError, split_list

# Every rank of a world runs the same number of timed steps: --iterations, or this many.
DEFAULT_WORLD_ITERATIONS = 10


def parse_world_sizes(
    text: str,
    min_seconds: float | None,
    threads: str = "0",
    strategies: str = "default",
) -> tuple[str, ...]:
    """The sizes, in the order given, each N (ranks) or NxD (N ranks of D devices each: 1xD,
    one process spreading its step over D devices of its own); () without --world-sizes.
    Raises SelectionError."""
    sizes: list[str] = []
    for item in split_list(text):
        sizes.append(_world_size(item))
    if not sizes:
        if text.strip():
            raise SelectionError("--world-sizes needs sizes, e.g. 1,2")
        if strategies.strip() != "default":
            raise SelectionError("--strategies chooses how worlds distribute: add --world-sizes")
        return ()
    check_world_loop(min_seconds, threads)
    return tuple(dict.fromkeys(sizes))


def _world_size(item: str) -> str:
    """N or NxD, normalised (1x1 is 1)."""
    ranks, sep, devices = item.lower().partition(DEVICES_SEPARATOR)
    if not ranks.isdigit() or not 1 <= int(ranks) <= MAX_WORLD_SIZE:
        raise SelectionError(
            f"invalid world size {item!r}: allowed 1..{MAX_WORLD_SIZE} ranks, or 1xD: one "
            f"process of D devices, D 1..{MAX_LOCAL_DEVICES}"
        )
    if not sep or devices == "1":
        return str(int(ranks))
    if not devices.isdigit() or not 1 <= int(devices) <= MAX_LOCAL_DEVICES:
        raise SelectionError(
            f"invalid world size {item!r}: D in NxD is the devices of each process, "
            f"1..{MAX_LOCAL_DEVICES}"
        )
    if int(ranks) > 1:
        raise SelectionError(
            f"world size {item!r}: several devices in each of several processes is not built "
            "(JAX's host devices cannot meet multi-process); use 1xD or N"
        )
    return f"{int(ranks)}{DEVICES_SEPARATOR}{int(devices)}"


def has_worlds(sizes: tuple[str, ...], specs: tuple[str, ...], min_seconds: float | None,
               threads: str) -> bool:  # fmt: skip
    """Whether the run measures worlds: --world-sizes, or a world someone else started
    (NAME@HOST:PORT+HOST:PORT), whose loop is checked as --world-sizes' is."""
    attached = any(world_size_of(spec) for spec in specs)
    if attached and not sizes:
        check_world_loop(min_seconds, threads)
    return bool(sizes) or attached


def check_world_loop(min_seconds: float | None, threads: str) -> None:
    """Every rank of a world runs the same steps, with the threads it was started with."""
    if split_list(threads) not in (["0"], []):
        raise SelectionError(
            "--threads cannot be used with worlds: each rank gets this host's CPUs shared by "
            "the largest world (2 CPUs and --world-sizes 1,2: one each)"
        )
    if min_seconds:
        raise SelectionError(
            "--min-seconds cannot be used with worlds: every rank of a world runs the same "
            "number of steps, so give --iterations instead"
        )


def _figure(value: object, template: str) -> str:
    missing = value is None or (isinstance(value, float) and math.isnan(value))
    return "-" if missing else template.format(value)


def world_table(results: pd.DataFrame, title: str) -> Table | None:
    """The run's distributed figures (analysis/scaling.py); None for a run without worlds."""
    table = scaling_table(results)
    if table.empty:
        return None
    shown = Table(title=title, caption=SCALING_CAPTION)
    for header in (
        "agent",
        "workload",
        "batch",
        "strategy",
        "ranks",
        "step",
        "items/s",
        "per replica",
        "efficiency",
        "comm share",
        "message",
        "algbw",
        "busbw",
    ):
        shown.add_column(header, justify="left" if header in ("agent", "workload") else "right")
    for row in table.to_dict("records"):
        collective = row["strategy"] == "collective"  # items mean nothing there: bandwidth
        items = math.nan if collective else row["items_per_second"]
        per_replica = math.nan if collective else row["per_replica_items_per_second"]
        ranks = str(row["ranks"]) + (f"x{row['devices']}" if row["devices"] > 1 else "")
        shown.add_row(
            row["family"],
            row["workload"],
            str(row["batch_size"]),
            row["strategy"],
            ranks,
            _figure(row["median_seconds"] * 1e3, "{:.2f} ms"),
            _figure(items, "{:,.0f}"),
            _figure(per_replica, "{:,.0f}"),
            _figure(row["scaling_efficiency"], "{:.0%}"),
            _figure(row["communication_share"], "{:.0%}"),
            _figure(row["collective_bytes"] / 1024, "{:,.0f} KiB"),
            _figure(row["algbw_bytes_per_second"] / 1e9, "{:.2f} GB/s"),
            _figure(row["busbw_bytes_per_second"] / 1e9, "{:.2f} GB/s"),
        )
    return shown


SCALING_CAPTION = (
    "batch: per replica (data parallel: a rank, or a device of a 1xD process), the world's "
    "(pipeline, tensor; allreduce: 4 KiB units); step: the slowest rank's, per step (median); "
    "items/s: all replicas; efficiency: items/s over replicas x the 1-replica world's of the "
    "same strategy; comm share: communication the engine could not hide, per step; message: "
    "allreduce bytes per rank; algbw: message / "
    "step; busbw: algbw x 2(n-1)/n (nccl-tests)"
)
