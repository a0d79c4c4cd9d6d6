"""Benchmark: what persisting one cell costs as a run grows (between cells, never during one).

Every cell is committed to the SQLite store, then the run folder is refreshed. Refreshing all
of it (results, samples, telemetry) after every cell costs time proportional to the run so
far, so a run's total persistence time grows with the square of its length. The collector
now rewrites results.parquet/.csv after every cell and the raw tables (samples, telemetry) at
most once a minute and at the end (run/recording.py RAW_TABLES_INTERVAL_SECONDS).

Synthetic cells shaped like real ones: 2,000 step times, and 40 scrapes of 14 series (a CPU
agent's telemetry over a 10-second cell at the default 0.25 s interval), in a temporary
store and folder. For cells 1..N it times the store commit, the results rewrite and the raw
rewrite separately, then reports the cost at a few points and the totals under both policies
(the new one with one raw rewrite per minute of a run whose cells take --cell-seconds).

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/bench_run_folder.py [--cells 500] [--cell-seconds 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from fwbench.collector.run.recording import RAW_TABLES_INTERVAL_SECONDS
from fwbench.collector.store import ResultStore, RunFolder

SAMPLES_PER_CELL = 2000
SCRAPES_PER_CELL = 40
SERIES_PER_SCRAPE = 14


def row(cell: int) -> dict[str, object]:
    return {
        "schema_version": 4,
        "run_id": "bench",
        "cell": cell,
        "agent": "tf-eigen",
        "workload": "conv2d",
        "phase": "train",
        "batch_size": 8,
        "median_seconds": 0.04,
        "status": "ok",
    }


def telemetry(cell: int, rng: np.random.Generator) -> pd.DataFrame:
    start = 1.8e9 + cell * 10.0
    times = np.repeat(start + np.arange(SCRAPES_PER_CELL) * 0.25, SERIES_PER_SCRAPE)
    metrics = np.tile([f"metric_{i}" for i in range(SERIES_PER_SCRAPE)], SCRAPES_PER_CELL)
    return pd.DataFrame(
        {
            "time": pd.to_datetime(times, unit="s", utc=True),
            "metric": pd.array(metrics, dtype="string"),
            "label": pd.array([""] * times.size, dtype="string"),
            "value": rng.random(times.size),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cells", type=int, default=500)
    parser.add_argument("--cell-seconds", type=float, default=10.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    commit, results, raw = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        store = ResultStore(Path(tmp) / "store.sqlite")
        folder = RunFolder(Path(tmp) / "run")
        folder.create()
        store.start_run("bench", folder.path, "2026-01-01T00:00:00+00:00", {"run_id": "bench"})
        for cell in range(args.cells):
            samples = rng.integers(30_000_000, 50_000_000, SAMPLES_PER_CELL).tolist()
            t0 = time.perf_counter()
            store.add_result("bench", row(cell), samples, telemetry(cell, rng))
            t1 = time.perf_counter()
            folder.write_results(store.results("bench"))
            t2 = time.perf_counter()
            folder.write_raw(store.samples("bench"), store.telemetry("bench"))
            t3 = time.perf_counter()
            commit.append(t1 - t0)
            results.append(t2 - t1)
            raw.append(t3 - t2)
        store.close()
    print(
        f"{args.cells} cells, {SAMPLES_PER_CELL} samples and "
        f"{SCRAPES_PER_CELL * SERIES_PER_SCRAPE} telemetry rows each\n"
    )
    print("| after cell | store commit | results rewrite | raw tables rewrite |")
    print("| --- | --- | --- | --- |")
    for cell in sorted({1, 10, 100, args.cells // 2, args.cells}):
        i = cell - 1
        print(
            f"| {cell} | {commit[i] * 1e3:.1f} ms | {results[i] * 1e3:.1f} ms | "
            f"{raw[i] * 1e3:.1f} ms |"
        )
    every_cell = sum(commit) + sum(results) + sum(raw)
    minutes = args.cells * args.cell_seconds / RAW_TABLES_INTERVAL_SECONDS
    step = max(1, round(args.cells / max(minutes, 1)))
    periodic = sum(commit) + sum(results) + sum(raw[step - 1 :: step]) + raw[-1]
    run_seconds = args.cells * args.cell_seconds
    print(
        f"\nTotal over a run of {args.cells} cells of {args.cell_seconds:g} s "
        f"({run_seconds / 60:.0f} min of measuring):"
    )
    print(
        f"- everything after every cell: {every_cell:.1f} s "
        f"({every_cell / run_seconds:.1%} of the run)"
    )
    print(
        f"- results every cell, raw tables every {RAW_TABLES_INTERVAL_SECONDS:g} s and at the "
        f"end: {periodic:.1f} s ({periodic / run_seconds:.1%})"
    )


if __name__ == "__main__":
    main()
