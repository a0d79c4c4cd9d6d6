"""The roofline of each host a run measured on (docs/calibration.md): achieved FLOP/s against
arithmetic intensity, log-log, under the host's calibrated ceilings: a flat compute roof per
dtype and thread count its rows ran with (peak GEMM FLOP/s) meeting the memory slope
(intensity x triad bandwidth). Each agent's cells are points, coloured by agent."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report.figures import Plot, grid, png

NAME, TITLE = "roofline", "Roofline: achieved FLOP/s against arithmetic intensity"
CAPTION = (
    "Each point is one cell, labelled workload and batch size (agent colour; circles infer, "
    "triangles train): x its arithmetic "
    "intensity from the catalogue's minimum-traffic byte model (inputs and parameters read "
    "once, outputs written once; an upper bound, so a point sits at or right of where its "
    "real traffic would put it), y the FLOP/s it achieved at its median step time (a model "
    "file's cell: its weights, inputs and outputs, and the FLOPs its reference agent's "
    "counter counted, docs/your-model.md). Lines: this "
    "host's calibrated ceiling, min(peak GEMM FLOP/s, intensity x triad bandwidth), per dtype "
    "and thread count the cells ran with (`collector calibrate`, docs/calibration.md). One "
    "panel per calibrated host."
)
_MARKERS = {"infer": "o", "train": "^"}
_ROOF_STYLES = ("-", "--", ":", "-.")


def roofline_rows(run: RunData) -> pd.DataFrame:
    """Ok rows with an intensity, achieved FLOP/s and a calibrated ceiling."""
    frame = run.results
    needed = ["arithmetic_intensity", "gflops_per_second", "peak_flops_per_second"]
    if frame.empty or any(c not in frame for c in needed):
        return frame.iloc[0:0]
    ok = frame[(frame["status"] == "ok") & frame[needed].notna().all(axis=1)]
    return ok[ok["gflops_per_second"] > 0]


def _roofs(rows: pd.DataFrame) -> list[tuple[str, float, float]]:
    """(label, peak FLOP/s, bandwidth bytes/s) for each dtype and thread count present."""
    roofs = {}
    for row in rows.to_dict("records"):
        threads = row["intra_op_threads"] if row["intra_op_threads"] is not pd.NA else None
        peak, bandwidth = float(row["peak_flops_per_second"]), row["bandwidth_bytes_per_second"]
        label = f"{row['dtype']}" + (f", {threads} thr" if threads else "")
        label += f": {peak / 1e9:.3g} GFLOP/s, {float(bandwidth) / 1e9:.3g} GB/s"
        roofs[label] = (peak, float(bandwidth))
    return [(label, peak, bw) for label, (peak, bw) in sorted(roofs.items())]


def _host_label(run: RunData, calibration_id: str) -> str:
    calibration: dict[str, Any] = run.metadata.get("calibration") or {}
    if calibration.get("id") != calibration_id:
        return f"calibration {calibration_id}"
    host = calibration.get("fingerprint", {})
    cpus = host.get("logical_cpus")
    return f"{host.get('hostname', '')}: {host.get('cpu_model', '')}, {cpus} CPUs"


def roofline(run: RunData, palette: dict[str, str]) -> Plot:
    figure = roofline_figure(run, palette)
    if figure is None:
        return Plot(
            NAME,
            TITLE,
            CAPTION,
            note="no cell with catalogue FLOPs and a calibrated host ceiling in this run "
            "(runs before schema 6, FWBENCH_CALIBRATION=off, or agents on other hosts)",
        )
    return Plot(NAME, TITLE, CAPTION, png(figure))


def roofline_figure(run: RunData, palette: dict[str, str]) -> Figure | None:
    """One panel per calibrated host, its legend outside it, to its right (inside, it hid the
    points in its corner: a run's lone point, often); None without a row to draw."""
    rows = roofline_rows(run)
    if rows.empty:
        return None
    hosts = list(dict.fromkeys(rows["calibration_id"]))
    figure, axes = grid(len(hosts), width=9.0 if len(hosts) == 1 else 6.4, height=5.2)
    for ax, calibration_id in zip(axes, hosts, strict=True):
        mine = rows[rows["calibration_id"] == calibration_id]
        intensity = mine["arithmetic_intensity"].astype(float)
        low, high = float(intensity.min()) / 4, float(intensity.max()) * 4
        for (label, peak, bandwidth), style in zip(
            _roofs(mine), _ROOF_STYLES * len(mine), strict=False
        ):
            x = np.geomspace(min(low, peak / bandwidth / 4), max(high, peak / bandwidth * 4), 200)
            ax.plot(x, np.minimum(peak, x * bandwidth), style, color="#444444", label=label)
        for (agent, phase), cells in mine.groupby(["agent", "phase"], sort=False):
            ax.scatter(
                cells["arithmetic_intensity"].astype(float),
                cells["gflops_per_second"].astype(float) * 1e9,
                color=palette.get(str(agent), "#888888"),
                marker=_MARKERS.get(str(phase), "s"),
                label=f"{agent} {phase}",
                zorder=3,
                edgecolors="black",
                linewidths=0.4,
            )
            for row in cells.to_dict("records"):
                where = (float(row["arithmetic_intensity"]), float(row["gflops_per_second"]) * 1e9)
                text = f"{row['workload']} {row['batch_size']}"
                ax.annotate(text, where, xytext=(4, 2), textcoords="offset points", fontsize=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("achieved FLOP/s")
        ax.set_title(_host_label(run, str(calibration_id)), fontsize=9)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    return figure
