"""The report's plots (matplotlib's object-oriented API on the Agg canvas: no pyplot state, no
display). Each builder returns a Plot: PNG bytes, or a note saying why there is nothing to
draw (no GPU telemetry, no accuracy workload) instead of failing."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from fwbench.collector.analysis.comparison import ComparisonSet
from fwbench.collector.analysis.contenders import RunData, samples_by_cell
from fwbench.collector.analysis.report.data import accuracy_curves, has_gpu_telemetry
from fwbench.collector.store.cell_key import varying_params
from fwbench.collector.verdicts.families import FAMILY

DPI = 100
PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)


@dataclass(frozen=True)
class Plot:
    name: str  # file stem and HTML id
    title: str
    caption: str  # how to read it
    png: bytes | None = None
    note: str = ""  # why there is no image


def colors(labels: Sequence[str]) -> dict[str, str]:
    return {label: PALETTE[i % len(PALETTE)] for i, label in enumerate(dict.fromkeys(labels))}


def png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    return buffer.getvalue()


def grid(panels: int, width: float = 5.0, height: float = 3.4) -> tuple[Figure, list[Axes]]:
    columns = min(panels, 2)
    rows = -(-panels // columns)
    figure = Figure(figsize=(width * columns, height * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel().tolist()
    for extra in axes[panels:]:
        extra.set_visible(False)
    return figure, axes[:panels]


def relative_time(result: ComparisonSet, baseline: str, palette: dict[str, str]) -> Plot:
    """Bars: each agent's time relative to the baseline's (1/speedup) per cell and phase."""
    title, name = "Time relative to the baseline", "relative_time"
    whose = "its family's native agent" if baseline == FAMILY else baseline
    caption = (
        f"Median step time divided by {whose}'s in the same cell (below 1 = faster), with "
        "the speedup's 95% interval; the grey band is the noise floor; * marks a significant "
        "difference (verdict faster or slower)."
    )
    if not result.comparisons:
        return Plot(name, title, caption, note="nothing to compare: one agent in this run")
    shown = varying_params(c.key for c in result.comparisons)
    frame = pd.DataFrame(
        {
            "phase": [c.key.phase for c in result.comparisons],
            "cell": [c.key.label(shown).replace(f" {c.key.phase}", "") for c in result.comparisons],
            "label": [f"{c.agent} ({c.mode})" if c.mode else c.agent for c in result.comparisons],
            "agent": [c.agent for c in result.comparisons],
            "relative": [1 / c.speedup for c in result.comparisons],
            "low": [1 / c.ci_high for c in result.comparisons],
            "high": [1 / c.ci_low for c in result.comparisons],
            "floor": [c.noise_floor for c in result.comparisons],
            "called": [c.verdict in ("faster", "slower") for c in result.comparisons],
        }
    )
    phases = list(dict.fromkeys(frame["phase"]))
    figure, axes = grid(len(phases), width=6.5, height=3.8)
    for ax, phase in zip(axes, phases, strict=True):
        part = frame[frame["phase"] == phase]
        cells = list(dict.fromkeys(part["cell"]))
        labels = list(dict.fromkeys(part["label"]))
        width = 0.8 / max(len(labels), 1)
        for i, label in enumerate(labels):
            rows = part[part["label"] == label].set_index("cell").reindex(cells)
            x = np.arange(len(cells)) + (i - (len(labels) - 1) / 2) * width
            error = [rows["relative"] - rows["low"], rows["high"] - rows["relative"]]
            agent = rows["agent"].dropna().iloc[0]
            ax.bar(
                x,
                rows["relative"],
                width,
                yerr=error,
                capsize=3,
                label=label,
                color=palette.get(agent, "#888888"),
            )
            for xi, (called, top) in enumerate(zip(rows["called"], rows["high"], strict=True)):
                if called is True:
                    ax.annotate("*", (x[xi], top), ha="center", va="bottom", fontsize=12)
        for position, cell in enumerate(cells):
            floor = float(part.loc[part["cell"] == cell, "floor"].max())
            ax.fill_between(
                [position - 0.45, position + 0.45],
                1 / (1 + floor),
                1 + floor,
                color="#cccccc",
                alpha=0.6,
                zorder=0,
            )
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(cells)), cells, rotation=20, ha="right", fontsize=8)
        ax.set_ylabel(f"time / {'family native' if baseline == FAMILY else baseline}")
        ax.set_title(f"{phase}")
        ax.legend(fontsize=8)
    figure.suptitle(f"Step time relative to {whose}")
    return Plot(name, title, caption, png(figure))


def versus_batch(summary: pd.DataFrame, palette: dict[str, str], what: str) -> Plot:
    """Lines per agent: median latency (what="latency") or throughput against batch size."""
    latency = what == "latency"
    name = "latency" if latency else "throughput"
    title = "Latency vs batch size" if latency else "Throughput vs batch size"
    caption = (
        "Median step time per batch size with its 95% interval, one panel per workload and phase."
        if latency
        else "Items per second at the median step time, per batch size."
    )
    summary = summary[summary["kind"] != "accuracy"] if not summary.empty else summary
    if summary.empty:
        return Plot(name, title, caption, note="no step-time cells in this run")
    panels = list(dict.fromkeys(zip(summary["workload"], summary["phase"], strict=True)))
    # An agent in several modes draws a line each: a colour per line, not per agent.
    by_line = summary["label"].nunique() > summary["agent"].nunique()
    line_colors = colors([str(label) for label in summary["label"]]) if by_line else {}
    figure, axes = grid(len(panels))
    for ax, (workload, phase) in zip(axes, panels, strict=True):
        part = summary[(summary["workload"] == workload) & (summary["phase"] == phase)]
        for label, lines in part.groupby("label", sort=False):
            lines = lines.sort_values("batch_size")
            agent = str(lines["agent"].iloc[0])
            color = line_colors.get(str(label)) or palette.get(agent, "#888888")
            x = lines["batch_size"].astype(float)
            if latency:
                y = lines["median_seconds"] * 1e3
                error = [y - lines["ci_low_seconds"] * 1e3, lines["ci_high_seconds"] * 1e3 - y]
                ax.errorbar(x, y, yerr=error, marker="o", capsize=3, label=label, color=color)
            else:
                ax.plot(x, lines["items_per_second"], marker="o", label=label, color=color)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel("median step time (ms)" if latency else "items / s")
        ax.set_title(f"{workload} {phase}")
        ax.legend(fontsize=8)
    return Plot(name, title, caption, png(figure))


def power_energy(run: RunData, palette: dict[str, str]) -> Plot:
    name, title = "power_energy", "GPU power and energy vs batch size"
    caption = "Mean GPU board power over the timed loop, and energy per item (NVML)."
    if not has_gpu_telemetry(run):
        return Plot(name, title, caption, note="no GPU telemetry in this run (CPU agents)")
    ok = run.results[(run.results["status"] == "ok") & run.results["gpu_power_mean_watts"].notna()]
    figure, axes = grid(2)
    for agent, rows in ok.groupby("agent", sort=False):
        rows = rows.groupby("batch_size").mean(numeric_only=True).reset_index()
        color = palette.get(str(agent), "#888888")
        axes[0].plot(
            rows["batch_size"], rows["gpu_power_mean_watts"], "o-", color=color, label=agent
        )
        per_item = rows["gpu_energy_joules"] / (rows["n"] * rows["batch_size"])
        axes[1].plot(rows["batch_size"], per_item, "o-", color=color, label=agent)
    for ax, unit in zip(axes, ("mean power (W)", "energy per item (J)"), strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(unit)
        ax.legend(fontsize=8)
    return Plot(name, title, caption, png(figure))


def resources(table: pd.DataFrame) -> Plot:
    name, title = "resources", "CPU time by mode and memory per agent"
    caption = (
        "Agent process CPU in user and system mode (percent of one core), host iowait "
        "(percent of all CPUs), averaged over the agent's cells; resident memory: highest "
        "peak and mean."
    )
    if table.empty:
        return Plot(name, title, caption, note="no CPU or memory telemetry in this run")
    figure, (cpu, memory) = grid(2)
    x = np.arange(len(table))
    bottom = np.zeros(len(table))
    for column, color in (
        ("cpu_user_percent", "#1f77b4"),
        ("cpu_system_percent", "#ff7f0e"),
        ("host_iowait_percent", "#7f7f7f"),
    ):
        if column in table:
            values = table[column].fillna(0).to_numpy(dtype=float)
            cpu.bar(
                x, values, 0.6, bottom=bottom, label=column.removesuffix("_percent"), color=color
            )
            bottom += values
    cpu.set_xticks(x, table["agent"], rotation=15, fontsize=8)
    cpu.set_ylabel("percent")
    cpu.legend(fontsize=8)
    width = 0.4
    for offset, column in ((-0.2, "rss_peak_bytes"), (0.2, "rss_mean_bytes")):
        if column in table:
            memory.bar(
                x + offset,
                table[column] / 2**20,
                width,
                label=column.removesuffix("_bytes").replace("_", " "),
                color="#555555" if "peak" in column else "#aaaaaa",
            )

    memory.set_xticks(x, table["agent"], rotation=15, fontsize=8)
    memory.set_ylabel("MiB")
    memory.legend(fontsize=8)
    return Plot(name, title, caption, png(figure))


def time_to_accuracy(run: RunData, palette: dict[str, str]) -> Plot:
    name, title = "time_to_accuracy", "Time to accuracy"
    caption = "Validation accuracy after each epoch against cumulative training time."
    curves = accuracy_curves(run)
    if not curves:
        return Plot(name, title, caption, note="no accuracy workloads in this run")
    figure, (ax,) = grid(1, width=7.0, height=4.0)
    for curve in curves:
        ax.plot(
            curve["seconds"],
            curve["accuracy"],
            "o-",
            markersize=3,
            color=palette.get(curve["agent"], "#888888"),
            label=f"{curve['agent']} {curve['mode']} bs={curve['batch_size']}",
        )
    targets = {c["target"] for c in curves if c["target"] is not None and not pd.isna(c["target"])}
    for target in targets:
        ax.axhline(target, linestyle="--", color="black", linewidth=0.8)
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("validation accuracy")
    ax.legend(fontsize=8)
    return Plot(name, title, caption, png(figure))


def distributions(run: RunData, summary: pd.DataFrame, palette: dict[str, str]) -> Plot:
    """Box plots of every agent's raw step times per cell (repetitions pooled)."""
    name, title = "distributions", "Step time distributions"
    caption = (
        "Raw step times per agent, repetitions pooled: box from Q1 to Q3, line at the median, "
        "whiskers to the last sample inside Tukey's fences (1.5 IQR), dots beyond them (the "
        "outliers counted in the table)."
    )
    if summary.empty:
        return Plot(name, title, caption, note="no measured cells in this run")
    by_cell = samples_by_cell(run.samples)
    keys = summary[["workload", "phase", "batch_size", "dtype", "threads_requested"]]
    panels = list(dict.fromkeys(keys.itertuples(index=False, name=None)))[:12]
    figure, axes = grid(len(panels), height=3.0)
    for ax, panel in zip(axes, panels, strict=True):
        part = summary[[row == panel for row in keys.itertuples(index=False, name=None)]]
        data = [np.concatenate([by_cell[c] for c in cells]) * 1e3 for cells in part["cells"]]
        boxes = ax.boxplot(
            data, tick_labels=list(part["label"]), patch_artist=True, flierprops={"markersize": 2}
        )
        for patch, agent in zip(boxes["boxes"], part["agent"], strict=True):
            patch.set_facecolor(palette.get(agent, "#888888"))
            patch.set_alpha(0.6)
        ax.set_ylabel("step time (ms)")
        workload, phase, batch = panel[:3]
        ax.set_title(f"{workload} {phase} bs={batch}", fontsize=10)
        ax.tick_params(axis="x", labelsize=8, rotation=15)
    return Plot(name, title, caption, png(figure))
