"""What the user sees during a run: a Rich progress bar per agent and one line per finished
cell; how a row's figures read (the run's table at the end: run_table.py)."""

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

from fwbench.collector.run.plan import Cell
from fwbench.collector.run.profiles import profile_text


def _cell_label(cell: Cell, swept: Collection[str] = ()) -> str:
    """`swept`: the shape parameters the run gave several values (--param NAME=A,B,...),
    named so that two of its cells never read the same."""
    threads = f" t={cell.threads}" if cell.threads else ""
    mode = f" {cell.mode}" if cell.mode else ""
    shape = "".join(f" {n}={cell.params[n]}" for n in sorted(swept) if n in cell.params)
    return f"{cell.workload} {cell.phase} bs={cell.batch_size} {cell.dtype}{shape}{mode}{threads}"


def missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def number_text(value: object, template: str) -> str:
    return "-" if missing(value) else template.format(value)


def accuracy_text(row: Mapping[Any, Any]) -> str:
    """ "97.5% at epoch 10 in 17.3 s" or "not reached: 91.0% after 50 epochs"."""
    if missing(row.get("final_accuracy")):
        return ""
    if row.get("reached_target") is True:
        return (
            f"{row['final_accuracy'] * 100:.1f}% at epoch {row['epochs_to_target']} "
            f"in {seconds_text(row['time_to_target_seconds'])}"
        )
    return f"not reached: {row['final_accuracy'] * 100:.1f}% after {row['epochs']} epochs"


def seconds_text(value: float) -> str:
    if missing(value):
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
    text = f"{seconds_text(row['median_seconds'])} median (CV {row['cv'] * 100:.1f}%, n={row['n']})"
    gflops = row.get("gflops_per_second")
    if gflops and not math.isnan(gflops):
        text += f", {gflops:.1f} GFLOP/s"
    text += generation_text(row) + profile_text(row)
    if mismatch := mismatch_text(row):
        text += f"; NOT AS ASKED: {mismatch}"
    if interference := interference_text(row):
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
        if not missing(row.get(column)):
            parts.append(template.format(seconds_text(float(row[column]))))
    if not missing(row.get("decode_tokens_per_second")):
        parts.append(f"{float(row['decode_tokens_per_second']):,.0f} tokens/s")
    if not missing(row.get("decode_bandwidth_fraction")):
        parts.append(f"{float(row['decode_bandwidth_fraction']):.0%} of memory bandwidth")
    return "; " + ", ".join(parts) if parts else ""


def mismatch_text(row: Mapping[Any, Any]) -> str:
    value = row.get("settings_mismatch")
    return "" if missing(value) else str(value)


def interference_text(row: Mapping[Any, Any]) -> str:
    """Why an ok row is interfered (run/interference.py); "" when it is not."""
    value = row.get("interference")
    return "" if row.get("status") != "ok" or missing(value) else str(value)


REFRESH_PER_SECOND = 2


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
            # Redrawn twice a second, not Rich's ten: the display's thread shares the CPUs it
            # measures (a world's ranks, most of all); off a terminal nothing is drawn until
            # the end, so nothing wakes it at all.
            refresh_per_second=REFRESH_PER_SECOND,
            auto_refresh=console.is_terminal,
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
        if mismatch_text(row) or interference_text(row):
            mark = "[yellow]!"
        self.progress.console.print(
            f"{mark}[/] {agent} {self._labels[agent]}: {describe_row(row)}", highlight=False
        )
        task = self._tasks[agent]
        self.progress.advance(task)
        if next(t for t in self.progress.tasks if t.id == task).finished:
            self.progress.update(task, description="done")
