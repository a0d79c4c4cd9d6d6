"""Analysis: where a repetition's time buys the most information: samples per process or
processes (issue 13, "short processes, many of them").

With the process as the unit (docs/report.md), a comparison's interval width is set by the
spread of the per-process medians over k processes. A process costs a fixed overhead O
(interpreter and framework start-up, the cell's build, first iteration and warm-up: measured
as the round's wall time less its timed phases, shared over the round's cells) plus n steps
of t seconds. For a budget B, k = B / (O + n t), so the width is proportional to

    sqrt(var_n * (O + n t)) / sqrt(B)

where var_n is the variance, across processes, of the log median of a process's first n
samples. This script measures var_n directly from stored runs with several fresh processes
per agent (an `--until-decided` run, or `--repeat N` with fresh processes), by truncating
each process's samples to its first n (what a shorter process would have measured, drift
included), and prints, per agent and cell, the width per sqrt(minute) for each n relative to
the n the run used; and the split of the median's variance into its between-process part
and what the within-process samples add (the classic two-stage allocation: the best n is
sqrt((pi/2) s_w^2 O / (s_b^2 t)), s_w and s_b the within- and between-process SDs of log
times).

Run from the repository root with the dev environment:
    .venv/bin/python tests/benchmarks/process_allocation.py RUN_FOLDER [RUN_FOLDER...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

CANDIDATES = (3, 5, 10, 20, 50, 100, 200)


def processes(folder: Path) -> tuple[pd.DataFrame, float]:
    """One row per (process, cell) with its log samples; and the overhead per cell (s)."""
    rows = pd.read_parquet(folder / "results.parquet")
    samples = pd.read_parquet(folder / "samples.parquet")
    meta = json.loads((folder / "run.json").read_text())
    rows = rows[rows["status"] == "ok"].copy()
    started = pd.to_datetime(rows["measure_started_at"])
    rows["timed"] = (pd.to_datetime(rows["measure_ended_at"]) - started).dt.total_seconds()
    rounds = (meta.get("until_decided") or {}).get("round_seconds")
    if rounds:
        per_round = rows.groupby("repetition").agg(timed=("timed", "sum"), cells=("cell", "size"))
        per_round["wall"] = rounds[: len(per_round)]
        overhead = float(((per_round.wall - per_round.timed) / per_round.cells).median())
    else:  # a --repeat run: its wall time over its cells
        wall = (pd.to_datetime(meta["finished_at"]) - pd.to_datetime(meta["started_at"])).seconds
        overhead = (wall - rows["timed"].sum()) / len(rows)
    by_cell = {c: np.log(g["seconds"].to_numpy()) for c, g in samples.groupby("cell")}
    rows["log_samples"] = [by_cell[c] for c in rows["cell"]]
    rows["run"] = folder.name
    batch = " bs" + rows["batch_size"].astype(str)
    rows["cell_name"] = rows["workload"] + " " + rows["phase"] + batch
    return rows, overhead


def analyse(rows: pd.DataFrame, overhead: float) -> pd.DataFrame:
    out = []
    for (agent, cell), group in rows.groupby(["agent", "cell_name"]):
        used = int(group["n"].median())
        t = float(group["median_seconds"].median())
        within = float(np.mean([np.var(x, ddof=1) for x in group["log_samples"]]))
        record: dict[str, object] = {"agent": agent, "cell": cell, "processes": len(group)}
        record |= {"step_s": t, "n_used": used, "overhead_s": overhead}
        widths = {}
        for n in sorted({*(c for c in CANDIDATES if c <= used), used}):
            medians = group.assign(m=[np.median(x[:n]) for x in group["log_samples"]])
            var_n = float(medians.groupby("run")["m"].var(ddof=1).mean())  # within each run
            widths[n] = math.sqrt(var_n * (overhead + n * t))
        var_all = widths[used] ** 2 / (overhead + used * t)
        between = max(var_all - (math.pi / 2) * within / used, 1e-12)
        record["sd_between_pct"] = 100 * math.sqrt(between)
        record["sd_within_pct"] = 100 * math.sqrt(within)
        record["best_n_model"] = math.sqrt((math.pi / 2) * within * overhead / (between * t))
        best = min(widths, key=widths.__getitem__)
        record["best_n_measured"] = best
        record["width_vs_used"] = " ".join(f"{n}:{w / widths[used]:.2f}" for n, w in widths.items())
        out.append(record)
    return pd.DataFrame(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    args = parser.parse_args()
    loaded = [processes(folder) for folder in args.folders]
    rows = pd.concat([r for r, _ in loaded], ignore_index=True)
    overhead = float(np.median([o for _, o in loaded]))
    table = analyse(rows, overhead)
    with pd.option_context("display.width", 200, "display.max_colwidth", 80):
        print(f"overhead per process and cell: {overhead:.2f} s (median over the runs)")
        print(table.round(3).to_string(index=False))


if __name__ == "__main__":
    main()
