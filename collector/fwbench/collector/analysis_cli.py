"""`collector compare` and `collector report`: questions asked of stored runs (registered on
the app in cli.py). Exit codes: 0 done, 2 bad input (unknown run, baseline or format)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from fwbench.collector import compare_format
from fwbench.collector.compare import (
    ComparisonError,
    RunData,
    compare_runs,
    compare_to_baseline,
    load_run,
)
from fwbench.collector.report import write_report
from fwbench.collector.significance import DEFAULT_NOISE_FLOOR
from fwbench.collector.store import ResultStore, default_store_path

console = Console(width=None if sys.stdout.isatty() else 200)
errors = Console(stderr=True)
StorePath = Annotated[
    Path | None,
    typer.Option(
        "--store",
        help="Results store (default: $FWBENCH_STORE or ~/.local/share/fwbench/results.sqlite).",
    ),
]


def _fail(message: str) -> NoReturn:
    errors.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _load(store: ResultStore, run_id: str) -> RunData:
    try:
        return load_run(store, run_id)
    except ComparisonError as error:
        _fail(str(error))


def compare(
    runs: Annotated[
        list[str], typer.Argument(help="RUN (with --baseline) or RUN_A RUN_B (regressions).")
    ],
    baseline: Annotated[
        str | None, typer.Option(help="Agent the others are compared with (one run).")
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(help="Two runs: smallest relative change called (0.05 = 5%)."),
    ] = 0.05,
    noise_floor: Annotated[
        float,
        typer.Option(help="One run: default noise floor, raised by A/A pairs in the run."),
    ] = DEFAULT_NOISE_FLOOR,
    output_format: Annotated[
        str, typer.Option("--format", help="table, markdown, csv or json.")
    ] = "table",
    store: StorePath = None,
) -> None:
    """Speedups with 95% intervals, tests and verdicts: agents against a baseline in one run,
    or every agent's cells in RUN_B against RUN_A."""
    if output_format not in compare_format.FORMATS:
        _fail(f"unknown format {output_format!r}; valid: {', '.join(compare_format.FORMATS)}")
    if not 0 <= threshold < 1 or not 0 <= noise_floor < 1:
        _fail("--threshold and --noise-floor are fractions in [0, 1), e.g. 0.05 for 5%")
    db = ResultStore(store or default_store_path())
    loaded = [_load(db, run_id) for run_id in runs]
    try:
        if len(loaded) == 1:
            if baseline is None:
                agents = ", ".join(dict.fromkeys(loaded[0].results["agent"].dropna()))
                _fail(f"one run needs --baseline AGENT; agents in {runs[0]}: {agents}")
            result = compare_to_baseline(loaded[0], baseline, noise_floor)
        elif len(loaded) == 2:
            if baseline is not None:
                _fail("--baseline compares agents within one run; give one run")
            result = compare_runs(loaded[0], loaded[1], threshold)
        else:
            _fail("give one run (with --baseline) or two runs (RUN_A RUN_B)")
    except ComparisonError as error:
        _fail(str(error))
    if output_format == "table":
        console.print(compare_format.rich_table(result))
        for reason in result.skipped:
            console.print(f"not compared: {reason}", highlight=False)
    elif output_format == "markdown":
        print(compare_format.markdown(result), end="")
    elif output_format == "csv":
        print(compare_format.csv(result), end="")
    else:
        print(compare_format.json_text(result))


def report(
    run_id: Annotated[str, typer.Argument(help="Run to report on.")],
    baseline: Annotated[
        str | None,
        typer.Option(help="Agent the others are compared with (default: the first that ran)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder for the report (default: RUN_FOLDER/report).")
    ] = None,
    store: StorePath = None,
) -> None:
    """Write report.html (self-contained: plots embedded) and report.md (with figures/*.png)."""
    db = ResultStore(store or default_store_path())
    run = _load(db, run_id)
    runs = db.runs()
    folder = runs.loc[runs["run_id"] == run_id, "out_dir"].iloc[0]
    target = out or Path(folder) / "report"
    try:
        files = write_report(run, target, baseline)
    except (ComparisonError, ValueError) as error:
        _fail(str(error))
    except OSError as error:
        _fail(f"cannot write the report to {target}: {error}; choose another --out")
    console.print(f"wrote {files.html} and {files.markdown} ({len(files.figures)} figures)")
