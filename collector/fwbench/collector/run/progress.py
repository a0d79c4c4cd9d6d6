"""What the user sees during a run: a Rich progress bar per agent, one line per finished
cell, and a summary table at the end."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

import pandas as pd
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from fwbench.collector.run.plan import Cell
from fwbench.collector.store.reasons import reason_lines


def _cell_label(cell: Cell, swept: Collection[str] = ()) -> str:
    """`swept`: the shape parameters the run gave several values (--param NAME=A,B,...),
    named so that two of its cells never read the same."""
    threads = f" t={cell.threads}" if cell.threads else ""
    mode = f" {cell.mode}" if cell.mode else ""
    shape = "".join(f" {n}={cell.params[n]}" for n in sorted(swept) if n in cell.params)
    return f"{cell.workload} {cell.phase} bs={cell.batch_size} {cell.dtype}{shape}{mode}{threads}"


def _missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _number(value: object, template: str) -> str:
    return "-" if _missing(value) else template.format(value)


def accuracy_text(row: Mapping[Any, Any]) -> str:
    """ "97.5% at epoch 10 in 17.3 s" or "not reached: 91.0% after 50 epochs"."""
    if _missing(row.get("final_accuracy")):
        return ""
    if row.get("reached_target") is True:
        return (
            f"{row['final_accuracy'] * 100:.1f}% at epoch {row['epochs_to_target']} "
            f"in {_seconds(row['time_to_target_seconds'])}"
        )
    return f"not reached: {row['final_accuracy'] * 100:.1f}% after {row['epochs']} epochs"


def _seconds(value: float) -> str:
    if _missing(value):
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} µs"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.3f} s"


def describe_row(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status']}: {row.get('error') or ''}"
    accuracy = accuracy_text(row)
    if accuracy:
        return accuracy
    text = f"{_seconds(row['median_seconds'])} median (CV {row['cv'] * 100:.1f}%, n={row['n']})"
    gflops = row.get("gflops_per_second")
    if gflops and not math.isnan(gflops):
        text += f", {gflops:.1f} GFLOP/s"
    text += generation_text(row)
    if mismatch := _mismatch(row):
        text += f"; NOT AS ASKED: {mismatch}"
    if interference := _interference(row):
        text += f"; INTERFERED: {interference} (no verdict from this row)"
    return text


def generation_text(row: Mapping[str, Any]) -> str:
    """A generation row's own figures: "; first token 0.62 ms, 0.33 ms a token, 2,851
    tokens/s, 65% of memory bandwidth" (those it has); "" for other rows."""
    parts = []
    for column, template in (
        ("time_to_first_token_seconds", "first token {}"),
        ("inter_token_latency_seconds", "{} a token"),
    ):
        if not _missing(row.get(column)):
            parts.append(template.format(_seconds(float(row[column]))))
    if not _missing(row.get("decode_tokens_per_second")):
        parts.append(f"{float(row['decode_tokens_per_second']):,.0f} tokens/s")
    if not _missing(row.get("decode_bandwidth_fraction")):
        parts.append(f"{float(row['decode_bandwidth_fraction']):.0%} of memory bandwidth")
    return "; " + ", ".join(parts) if parts else ""


def _mismatch(row: Mapping[Any, Any]) -> str:
    value = row.get("settings_mismatch")
    return "" if _missing(value) else str(value)


def _interference(row: Mapping[Any, Any]) -> str:
    """Why an ok row is interfered (run/interference.py); "" when it is not."""
    value = row.get("interference")
    return "" if row.get("status") != "ok" or _missing(value) else str(value)


class RichDisplay:
    def __init__(
        self, console: Console, cells_per_agent: dict[str, int], swept: Collection[str] = ()
    ) -> None:
        self.console = console
        self.swept = tuple(swept)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[agent]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
        )
        self._tasks: dict[str, TaskID] = {}
        self._add_tasks(cells_per_agent)
        self._labels: dict[str, str] = {}

    def _add_tasks(self, cells_per_agent: dict[str, int]) -> None:
        """One bar per agent with cells to measure."""
        self._tasks = {
            agent: self.progress.add_task("waiting", total=total, agent=agent)
            for agent, total in cells_per_agent.items()
            if total
        }

    def new_round(self, number: int, cells_per_agent: dict[str, int]) -> None:
        """Measuring until decided: one bar per agent for this round's cells."""
        for task in list(self._tasks.values()):
            self.progress.remove_task(task)
        open_cells = sum(cells_per_agent.values())
        self.progress.console.print(
            f"round {number + 1}: {open_cells} cells with an open comparison", highlight=False
        )
        self._add_tasks(cells_per_agent)

    def __enter__(self) -> RichDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def cell_started(self, agent: str, cell: Cell) -> None:
        self._labels[agent] = _cell_label(cell, self.swept)
        self.progress.update(self._tasks[agent], description=self._labels[agent])

    def cell_progress(self, agent: str, stage: str, iterations: int) -> None:
        done = f" {iterations} it" if iterations else ""
        self.progress.update(
            self._tasks[agent], description=f"{self._labels[agent]} · {stage}{done}"
        )

    def note(self, agent: str, text: str) -> None:
        """A line of its own about the agent's next cell (e.g. waiting for a quiet host)."""
        self.progress.console.print(f"[yellow]…[/] {agent}: {text}", highlight=False)

    def cell_finished(self, agent: str, row: dict[str, Any]) -> None:
        mark = {"ok": "[green]✓", "unsupported": "[yellow]-", "cancelled": "[yellow]✗"}.get(
            row["status"], "[red]✗"
        )
        if _mismatch(row) or _interference(row):
            mark = "[yellow]!"
        self.progress.console.print(
            f"{mark}[/] {agent} {self._labels[agent]}: {describe_row(row)}", highlight=False
        )
        task = self._tasks[agent]
        self.progress.advance(task)
        if next(t for t in self.progress.tasks if t.id == task).finished:
            self.progress.update(task, description="done")


def _bytes(value: object) -> str:
    if _missing(value):
        return "-"
    size = float(value)  # type: ignore[arg-type]
    return f"{size / 2**30:.2f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


def _cpu(row: Mapping[str, Any]) -> str:
    user, system = row.get("cpu_user_percent"), row.get("cpu_system_percent")
    if _missing(user) or _missing(system):
        return "-"
    return f"{user:.0f}/{system:.0f}"


# Telemetry columns of the summary: (header, how a row shows it); GPU ones only with a GPU.
_TELEMETRY = (
    ("usr/sys %", _cpu),
    ("iowait %", lambda row: _number(row.get("host_iowait_percent"), "{:.1f}")),
    ("others %", lambda row: _number(row.get("others_cpu_percent"), "{:.0f}")),
    ("peak RSS", lambda row: _bytes(row.get("rss_peak_bytes"))),
)
_GPU_TELEMETRY = (
    ("GPU %", lambda row: _number(row.get("gpu_utilization_mean_percent"), "{:.0f}")),
    ("GPU W", lambda row: _number(row.get("gpu_power_mean_watts"), "{:.0f}")),
    ("GPU J", lambda row: _number(row.get("gpu_energy_joules"), "{:,.1f}")),
)


def summary_table(results: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, show_lines=False)
    gpu = "gpu_utilization_mean_percent" in results and bool(
        results["gpu_utilization_mean_percent"].notna().any()
    )
    telemetry = (*_TELEMETRY, *(_GPU_TELEMETRY if gpu else ()))
    strategies = "strategy" in results and bool(results["strategy"].notna().any())
    for header in (
        "agent",
        "workload",
        "phase",
        "bs",
        "dtype",
        "mode",
        *(("strategy",) if strategies else ()),
        "thr",
        "median",
        "CV",
        "items/s",
        "GFLOP/s",
        "% peak",
        "first iter",
        *(name for name, _ in telemetry),
        "status",
    ):
        left = ("agent", "workload", "phase", "dtype", "mode", "strategy", "status")
        justify = "left" if header in left else "right"
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for row in results.to_dict("records"):
        ok = row["status"] == "ok"
        table.add_row(
            row["agent"],
            row["workload"],
            row["phase"],
            str(row["batch_size"]),
            row["dtype"],
            row["mode"] if not _missing(row["mode"]) else "",
            *((_number(row.get("strategy"), "{}"),) if strategies else ()),
            _number(row["intra_op_threads"], "{}"),
            _seconds(row["median_seconds"]) if ok else "-",
            _number(row["cv"] * 100 if ok else None, "{:.1f}%"),
            _number(row["items_per_second"] if ok else None, "{:,.1f}"),
            _number(row["gflops_per_second"] if ok else None, "{:,.1f}"),
            _number(row.get("peak_fraction") if ok else None, "{:.1%}"),
            _seconds(row["first_iteration_seconds"]) if ok else "-",
            *(show(row) if ok else "-" for _, show in telemetry),
            _status(row),
        )
    records = results.to_dict("records")
    mismatched = sum(bool(_mismatch(row)) for row in records)
    interfered = sum(bool(_interference(row)) for row in records)
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
    captions += reason_lines(records, title.removeprefix("run "))
    if captions:
        table.caption = "\n".join(captions)
        table.caption_justify = "left"
    return table


def _status(row: Mapping[Any, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status']} ({row['error_code']})"
    text = accuracy_text(row) or "ok"
    mismatch = _mismatch(row)
    text = f"{text} * {mismatch}" if mismatch else text
    return f"{text} ! interfered" if _interference(row) else text
