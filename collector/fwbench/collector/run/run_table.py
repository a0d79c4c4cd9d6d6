"""The run's table at the end of `collector run` and in `collector results RUN`: a row a cell,
its columns fitted to the width it is drawn at (RunTable), and under it why every cell that did
not measure did not (store/reasons.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from fwbench.collector.run.progress import (
    accuracy_text,
    interference_text,
    mismatch_text,
    missing,
    number_text,
    seconds_text,
)
from fwbench.collector.store.interference_columns import UNKNOWN, UNKNOWN_WHY, interference_unknown
from fwbench.collector.store.reasons import reason_lines


def _bytes(value: object) -> str:
    if missing(value):
        return "-"
    size = float(value)  # type: ignore[arg-type]
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def _cpu(row: Mapping[str, Any]) -> str:
    user, system = row.get("cpu_user_percent"), row.get("cpu_system_percent")
    if missing(user) or missing(system):
        return "-"
    return f"{user:.0f}/{system:.0f}"


# Telemetry columns of the summary: (header, how a row shows it); GPU ones only with a GPU.
_TELEMETRY = (
    ("usr/sys %", _cpu),
    ("iowait %", lambda row: number_text(row.get("host_iowait_percent"), "{:.1f}")),
    ("others %", lambda row: number_text(row.get("others_cpu_percent"), "{:.0f}")),
    ("peak RSS", lambda row: _bytes(row.get("rss_peak_bytes"))),
)
_GPU_TELEMETRY = (
    ("GPU %", lambda row: number_text(row.get("gpu_utilization_mean_percent"), "{:.0f}")),
    ("GPU W", lambda row: number_text(row.get("gpu_power_mean_watts"), "{:.0f}")),
    ("GPU J", lambda row: number_text(row.get("gpu_energy_joules"), "{:,.1f}")),
)


# Where the whole table cannot be drawn at the console's width, these go first, in this order
# (said under the table); what names a cell (agent, workload, ...) and its median never do.
_LEFT_OUT_FIRST = (
    "others %",
    "iowait %",
    "usr/sys %",
    "GPU J",
    "GPU W",
    "GPU %",
    "first iter",
    "peak RSS",
    "% peak",
    "GFLOP/s",
    "thr",
)
_NAMES = ("agent", "workload", "phase", "dtype", "mode", "strategy", "status")


class RunTable:
    """The run's table, drawn for the width it is printed at: every column where they fit
    whole; else the telemetry and derived columns of _LEFT_OUT_FIRST are left out, one by one
    until the rest fit, and named under the table. A name (an agent, a workload) is never cut
    short: three agents shown as `keras…` could not be told apart."""

    def __init__(
        self, title: str, columns: list[tuple[str, list[str]]], captions: list[str]
    ) -> None:
        self.title, self.columns, self.captions = title, columns, captions

    def _table(self, shown: list[tuple[str, list[str]]]) -> Table:
        table = Table(title=self.title, show_lines=False)
        for header, cells in shown:
            name = header in _NAMES and header != "status"
            longest = max([len(cell) for cell in cells] + [len(header)])
            table.add_column(
                header,
                justify="left" if header in _NAMES else "right",
                min_width=longest if name else None,
                overflow="fold",  # wrapped, never cut to "…"
            )
        for row in zip(*(cells for _, cells in shown), strict=True):
            table.add_row(*row)
        return table

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = options.max_width
        unbounded = options.update(width=10**6)  # a table's natural width, not the console's

        def measured(table: Table) -> Measurement:
            return Measurement.get(console, unbounded, table)

        # Every cell on one line, but the status, which may wrap (a failure's is long).
        statuses = next(cells for header, cells in self.columns if header == "status")
        wraps = max(len(cell) for cell in ["status", *statuses]) - max(
            len(word) for cell in ["status", *statuses] for word in cell.split()
        )
        shown, left_out = list(self.columns), []
        table = self._table(shown)
        for header in _LEFT_OUT_FIRST:
            if measured(table).maximum - wraps <= width:
                break
            if any(name == header for name, _ in shown):
                shown = [column for column in shown if column[0] != header]
                left_out.append(header)
                table = self._table(shown)
        captions = list(self.captions)
        if left_out:
            captions.insert(
                0,
                f"left out at this width ({width} columns): {', '.join(left_out)}; "
                "`collector results RUN --export FILE.csv` has every column",
            )
        if measured(table).minimum > width:  # a word would be broken: a line a cell
            yield Text(self.title, style="italic", justify="center")
            for row in zip(*(cells for _, cells in shown), strict=True):
                said = dict(zip((header for header, _ in shown), row, strict=True))
                yield Text(_row_line(said))
            yield Text("\n".join(captions))
            return
        if captions:
            table.caption = "\n".join(captions)
            table.caption_justify = "left"
        yield table


def _row_line(cells: Mapping[str, str]) -> str:
    """One cell of the table as a line, for a console too narrow for the table."""
    names = " ".join(cells[h] for h in ("agent", "workload", "phase") if h in cells)
    shape = " ".join(
        v for v in (cells.get("dtype"), cells.get("mode"), cells.get("strategy")) if v and v != "-"
    )
    figures = ", ".join(
        f"{header} {cells[header]}"
        for header in ("median", "CV", "items/s")
        if cells.get(header, "-") != "-"
    )
    return f"{names} bs={cells['bs']} {shape}: {cells['status']}" + (
        f"; {figures}" if figures else ""
    )


def summary_table(results: pd.DataFrame, title: str) -> RunTable:
    gpu = "gpu_utilization_mean_percent" in results and bool(
        results["gpu_utilization_mean_percent"].notna().any()
    )
    telemetry = (*_TELEMETRY, *(_GPU_TELEMETRY if gpu else ()))
    strategies = "strategy" in results and bool(results["strategy"].notna().any())
    records = results.to_dict("records")

    def measured(show: Any) -> Any:
        return lambda row: show(row) if row["status"] == "ok" else "-"

    columns: list[tuple[str, Any]] = [
        ("agent", lambda row: row["agent"]),
        ("workload", lambda row: row["workload"]),
        ("phase", lambda row: row["phase"]),
        ("bs", lambda row: str(row["batch_size"])),
        ("dtype", lambda row: row["dtype"]),
        ("mode", lambda row: row["mode"] if not missing(row["mode"]) else ""),
        *(
            (("strategy", lambda row: number_text(row.get("strategy"), "{}")),)
            if strategies
            else ()
        ),
        ("thr", lambda row: number_text(row["intra_op_threads"], "{}")),
        ("median", measured(lambda row: seconds_text(row["median_seconds"]))),
        ("CV", measured(lambda row: number_text(row["cv"] * 100, "{:.1f}%"))),
        ("items/s", measured(lambda row: number_text(row["items_per_second"], "{:,.1f}"))),
        ("GFLOP/s", measured(lambda row: number_text(row["gflops_per_second"], "{:,.1f}"))),
        ("% peak", measured(lambda row: number_text(row.get("peak_fraction"), "{:.1%}"))),
        ("first iter", measured(lambda row: seconds_text(row["first_iteration_seconds"]))),
        *((name, measured(show)) for name, show in telemetry),
        ("status", _status),
    ]
    mismatched = sum(bool(mismatch_text(row)) for row in records)
    interfered = sum(bool(interference_text(row)) for row in records)
    captions = []
    if mismatched:
        captions.append(
            f"* {mismatched} cell(s) ran with other settings than asked (settings_mismatch "
            "column): no verdict is made from them"
        )
    if interfered:
        captions.append(
            f"! {interfered} cell(s) interfered: other processes took more of the agent's CPUs "
            "than --interference-threshold allows while they were timed (interference "
            "column): kept, and no verdict is made from them"
        )
    if unknown := sum(interference_unknown(row) for row in records):
        captions.append(f"? {unknown} cell(s): {UNKNOWN}: {UNKNOWN_WHY}")
    captions += outputs_lines(records)
    captions += reason_lines(records, title.removeprefix("run "))
    cells = [(header, [str(show(row)) for row in records]) for header, show in columns]
    return RunTable(title, cells, captions)


def outputs_lines(records: Sequence[Mapping[Any, Any]]) -> list[str]:
    """What the model file's inference rows say of their outputs (store/model_columns.py): how
    many are within tolerance of the reference's and the largest difference, and each that is
    not."""
    compared = [r for r in records if r["status"] == "ok" and not missing(r.get("outputs_match"))]
    if not compared:
        return []
    same = [r for r in compared if r["outputs_match"]]
    lines = []
    if same:
        largest = max(float(r["output_max_abs_diff"]) for r in same)
        lines.append(
            f"= {len(same)} cell(s) of the model file: outputs within tolerance of "
            f"{same[0]['outputs_reference']}'s (largest difference {largest:.3g})"
        )
    lines += [
        f"≠ {r['agent']} {r['workload']} bs={r['batch_size']}: outputs differ from "
        f"{r['outputs_reference']}'s: {r['outputs_note']}; no verdict is made from it"
        for r in compared
        if not r["outputs_match"]
    ]
    return lines


def _status(row: Mapping[Any, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status']} ({row['error_code']})"
    text = accuracy_text(row) or "ok"
    mismatch = mismatch_text(row)
    text = f"{text} * {mismatch}" if mismatch else text
    if row.get("outputs_match") is False:
        text = f"{text} ≠ outputs differ"
    if interference_unknown(row):
        return f"{text} ? {UNKNOWN}"
    return f"{text} ! interfered" if interference_text(row) else text
