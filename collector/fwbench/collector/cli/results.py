"""`collector results` and `collector schema`: stored runs, shown, listed or exported."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from fwbench.collector.cli.common import (
    StorePath,
    console,
    fail,
    fail_with,
    print_json,
    reads_store,
)

if TYPE_CHECKING:  # pandas and the store are imported where they are used: `--help` is fast
    import pandas as pd

EXPORT_FORMATS = (".csv", ".parquet", ".jsonl", ".md")


def export_table(frame: pd.DataFrame, path: Path) -> None:
    """Writes the table in the format its suffix names (one of EXPORT_FORMATS)."""
    import pandas as pd

    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    elif path.suffix == ".jsonl":
        # pandas 3.1's to_json drops nanoseconds even with date_unit="ns": format them here.
        stamps = frame.select_dtypes("datetimetz").columns
        text = frame.astype({c: object for c in stamps})
        for column in stamps:
            text[column] = frame[column].map(lambda t: None if pd.isna(t) else t.isoformat())
        text.to_json(path, orient="records", lines=True)
    else:
        path.write_text(str(frame.to_markdown(index=False)) + "\n")


@reads_store
def results(
    run_id: Annotated[
        str | None, typer.Argument(help="Run to show (its ID or folder); omit to list runs.")
    ] = None,
    export: Annotated[
        Path | None,
        typer.Option(help="Write the run's table to this file: .csv, .parquet, .jsonl or .md."),
    ] = None,
    samples: Annotated[
        bool,
        typer.Option(
            "--samples", help="Export every raw step time (cell, iteration, seconds) instead."
        ),
    ] = False,
    store: StorePath = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the runs (or the run's rows) as JSON.")
    ] = False,
    merge: Annotated[
        Path | None,
        typer.Option(
            metavar="STORE|FOLDER",
            help="Add the runs of another store (or of a run folder holding one: an exported "
            "Slurm job's, `collector run --slurm-export`) to this store: runs it lacks, and "
            "cells it lacks of runs it holds; a cell both hold must be the same, or nothing is "
            "merged.",
        ),
    ] = None,
) -> None:
    """List past runs, show one, export one, or merge another store's runs."""
    from fwbench.collector.analysis.contenders import ComparisonError, run_id_of
    from fwbench.collector.analysis.scaling import world_table
    from fwbench.collector.run.run_table import summary_table
    from fwbench.collector.store import ResultStore, default_store_path

    if merge is not None:
        merge_into(store or default_store_path(), merge, run_id)
        return
    db = ResultStore(store or default_store_path(), create=False)
    if run_id is None:
        runs = db.runs()
        if as_json:
            print_json(runs.to_dict("records"))
            return
        table = Table("run", "started", "status", "cells", "folder")
        for row in runs.to_dict("records"):
            table.add_row(
                row["run_id"],
                row["started_at"][:19],
                row["status"],
                str(row["cells"]),
                row["out_dir"],
            )
        console.print(table)
        return
    try:
        run_id = run_id_of(run_id)
    except ComparisonError as error:
        fail_with(error)
    if db.run_metadata(run_id) is None:
        fail(f"no run {run_id!r} in {db.path}; `collector results` lists the runs")
    if samples and export is None:
        fail("--samples exports the raw step times; give --export FILE")
    frame = db.samples(run_id) if samples else db.results(run_id)
    if export is None and as_json:
        print(frame.to_json(orient="records", date_format="iso"))
        return
    if export is None:
        console.print(summary_table(frame, f"run {run_id}"))
        worlds = world_table(frame, f"run {run_id}: distributed", db.samples(run_id))
        if worlds is not None:
            console.print(worlds)
        return
    if export.suffix not in EXPORT_FORMATS:
        fail(f"unknown export format {export.suffix!r}; valid: {', '.join(EXPORT_FORMATS)}")
    export_table(frame, export)
    console.print(f"wrote {len(frame)} rows to {export}")


def merge_into(target: Path, source: Path, run_id: str | None) -> None:
    from fwbench.collector.store import ResultStore
    from fwbench.collector.store.merge import MergeRefused, merge_stores, source_store

    if run_id is not None:
        fail("--merge adds every run of the store it names; give no RUN_ID with it")
    try:
        found = source_store(source)
        ResultStore(target).close()  # made when missing, checked when present
        merged = merge_stores(target, found)
    except MergeRefused as error:
        fail_with(error)
    for one in merged:
        said = "already held, the same" if not one.added else f"{one.added} cells added"
        if one.status == "kept":
            said = f"the store holds more of it ({one.held} cells): kept as it is"
        elif one.status == "running":
            said += " (still running where it was measured: merge again when it has ended)"
        console.print(f"run {one.run_id} ({one.status}): {said}")
    console.print(f"merged {len(merged)} runs from {found} into {target}")


def schema() -> None:
    """Print the results table schema as Markdown (docs/results-schema.md)."""
    from fwbench.collector.store.schema import schema_markdown

    print(schema_markdown(), end="")
