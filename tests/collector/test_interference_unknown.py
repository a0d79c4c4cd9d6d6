"""A row whose interference could not be judged (its agent exported no affinity series, or
nothing was scraped) is never shown as a plain `ok`: the end-of-run table, compare (at a
glance and in JSON), a run's sequential decisions and the report say "interference unknown",
and a verdict resting on such rows says so. tests/integration/test_interference.py runs an
agent without the series beside a busy loop."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from rich.console import Console
from typer.testing import CliRunner

from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report import write_report
from fwbench.collector.cli import app
from fwbench.collector.run.run_table import summary_table
from fwbench.collector.store import ResultStore
from fwbench.collector.store.interference_columns import UNKNOWN, interference_unknown
from fwbench.collector.verdicts.record import Decision

CELL = ("gemm", "infer", 1)


def processes(median: float, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [median * rng.lognormal(0, 0.01, 40) for _ in range(3)]


def test_an_unjudged_ok_row_is_unknown_and_a_judged_or_failed_one_is_not() -> None:
    assert interference_unknown({"status": "ok", "interfered": None})
    assert interference_unknown({"status": "ok", "interfered": pd.NA})
    assert interference_unknown({"status": "ok"})  # a run from before the column
    assert not interference_unknown({"status": "ok", "interfered": False})
    assert not interference_unknown({"status": "ok", "interfered": True})
    assert not interference_unknown({"status": "failed", "interfered": None})


def test_the_run_table_says_unknown_where_it_would_say_ok() -> None:
    base = {"workload": "gemm", "phase": "infer", "batch_size": 1, "dtype": "float32"}
    base |= {"mode": "", "intra_op_threads": 1, "median_seconds": 0.01, "cv": 0.01}
    base |= {"items_per_second": 100.0, "gflops_per_second": 1.0, "status": "ok"}
    base |= {"first_iteration_seconds": 0.02, "error_code": None, "error": None}
    rows = [
        {**base, "agent": "outside", "interfered": None},
        {**base, "agent": "inside", "interfered": False},
    ]
    console = Console(width=250, record=True)
    console.print(summary_table(pd.DataFrame(rows), "run r"))
    text = console.export_text()
    outside = next(line for line in text.splitlines() if "outside" in line)
    inside = next(line for line in text.splitlines() if "│ inside" in line)
    assert f"ok ? {UNKNOWN}" in outside and UNKNOWN not in inside
    assert f"? 1 cell(s): {UNKNOWN}" in text and "fwbench_affinity_cpu_seconds_total" in text


def test_compare_and_the_report_say_the_verdict_rests_on_unjudged_rows(
    make_run: Callable[..., RunData], store: ResultStore, tmp_path: Path
) -> None:
    run = make_run(
        "mixed",
        {"inside": {CELL: processes(0.010, 1)}, "outside": {CELL: processes(0.020, 2)}},
        {"outside": {"interfered": None}},
    )
    (comparison,) = compare_to_baseline(run, "inside").comparisons
    assert comparison.verdict == "slower"  # the rows stand: unknown is not interfered
    assert f"{UNKNOWN} for all 3 of outside's processes here" in comparison.notes
    assert "inside's processes" not in comparison.notes
    command = ["compare", "mixed", "--baseline", "inside", "--store", str(store.path)]
    shown = CliRunner().invoke(app, command, env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    assert f"outside is slower than inside in gemm infer bs=1: 0.50x [0.50, 0.50] ({UNKNOWN})" in (
        shown.output
    )
    row = next(x for x in shown.output.splitlines() if re.search(r"\boutside\s+\d\.\d{3}x", x))
    assert row.rstrip().endswith("1")  # the mark of the note that says it
    assert f"1: {UNKNOWN} for some of the processes compared" in shown.output
    page = write_report(run, tmp_path / "report", "inside").markdown.read_text()
    flagged = [line for line in page.splitlines() if line.startswith("| ") and "outside" in line]
    assert any(line.rstrip(" |").endswith(UNKNOWN) for line in flagged), flagged
    document = CliRunner().invoke(app, [*command, "--format", "json"]).output
    (recorded,) = json.loads(document)["comparisons"]
    assert UNKNOWN in recorded["notes"]


def test_a_sequential_decision_says_how_many_processes_were_unjudged() -> None:
    stored = {"key": ["gemm", "infer", 1, "float32", 0, "{}", ""], "agent": "a", "mode": ""}
    stored |= {"against": "b", "against_mode": "", "verdict": "faster", "why": None}
    assert not any(UNKNOWN in r for r in Decision.from_record(stored).reasons())
    said = Decision.from_record({**stored, "interference_unknown": 4}).reasons()
    assert f"{UNKNOWN} for 4 of the processes it rests on" in said[0]
