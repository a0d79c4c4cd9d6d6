"""The report's distributed section: the run's worlds as the CLI shows them (analysis/
scaling.py: step, items/s, per replica, efficiency, communication share, allreduce
bandwidth), and a plot of throughput against replicas per workload; nothing for a run
without worlds."""

from __future__ import annotations

from typing import Any

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report.figures import Plot, colors, grid, png
from fwbench.collector.analysis.scaling import CAPTION, HEADERS, scaling_rows, scaling_table

MAX_PANELS = 8


def distributed_section(run: RunData) -> dict[str, Any] | None:
    """Headers, rows and caption of the run's distributed table; None without worlds."""
    table = scaling_table(run.results, run.samples)
    if table.empty:
        return None
    return {"headers": list(HEADERS), "rows": scaling_rows(table), "caption": CAPTION}


def scaling_plot(run: RunData) -> Plot:
    """Per workload, all replicas' items/s (busbw for a collective) against the world's shape
    (ranks, or ranks x devices), one line per agent and strategy."""
    name, title = "scaling", "Distributed scaling"
    caption = (
        "Items per second of the whole world (a collective: bus bandwidth, GB/s) against its "
        "shape, N ranks or 1xD (one process of D devices), per agent and strategy; the "
        "dotted line is perfect weak scaling from the 1-replica world (data parallelism)."
    )
    table = scaling_table(run.results)
    if table.empty:
        return Plot(name, title, caption, note="no distributed worlds in this run")
    table = table.sort_values(["replicas", "devices"])
    table["shape"] = [
        f"{r}x{d}" if d > 1 else str(r)
        for r, d in zip(table["ranks"], table["devices"], strict=True)
    ]
    palette = colors([f"{f} {s}" for f, s in zip(table["family"], table["strategy"], strict=True)])
    workloads = list(dict.fromkeys(table["workload"]))[:MAX_PANELS]
    figure, axes = grid(len(workloads), height=3.2)
    for ax, workload in zip(axes, workloads, strict=True):
        part = table[table["workload"] == workload]
        shapes = list(dict.fromkeys(part["shape"]))
        for (family, strategy), line in part.groupby(["family", "strategy"], sort=False):
            collective = strategy == "collective"
            values = (
                line["busbw_bytes_per_second"] / 1e9 if collective else line["items_per_second"]
            )
            x = [shapes.index(shape) for shape in line["shape"]]
            base = palette[f"{family} {strategy}"]
            ax.plot(x, values, "o-", color=base, label=f"{family} {strategy}")
            single = line[line["replicas"] == 1]
            if not collective and not single.empty and strategy not in ("pipeline", "tensor"):
                ideal = single["items_per_second"].iloc[0] * line["replicas"]
                ax.plot(x, ideal, ":", color=base, linewidth=1)
        ax.set_xticks(range(len(shapes)), shapes)
        ax.set_title(f"{workload} bs={part['batch_size'].iloc[0]}", fontsize=9)
        ax.set_xlabel("world (ranks, or 1xD devices)")
        ax.set_ylabel("items/s (collective: busbw GB/s)")
        ax.legend(fontsize=7)
    return Plot(name, title, caption, png(figure))
