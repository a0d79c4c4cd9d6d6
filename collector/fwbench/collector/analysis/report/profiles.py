"""The report's profile figure (`collector run --profile`, docs/profiling.md): for each profiled
cell, one stacked bar per agent, its timed median split over the common classes of operations
by its profile's shares, as `collector explain` splits it."""

from __future__ import annotations

import math

from matplotlib.patches import Patch

from fwbench.collector.analysis.attribution import class_shares, profiled_rows
from fwbench.collector.analysis.contenders import RunData, contenders
from fwbench.collector.analysis.report.figures import PALETTE, Plot, grid, png
from fwbench.spec import op_classes

CLASSES = (*op_classes.classes(), op_classes.OUTSIDE, "unmapped")
MOST_CELLS = 8  # panels drawn; the rest are named in the caption


# One colour a class, none grey or black (outside's and unmapped's): the report's palette less
# its grey, and two more (it has ten colours; there are eleven classes).
CLASS_PALETTE = (*(c for c in PALETTE if c != "#7f7f7f"), "#393b79", "#e7ba52")


def class_colors() -> dict[str, str]:
    colors = dict(zip(CLASSES, CLASS_PALETTE, strict=False))
    colors[op_classes.OUTSIDE], colors["unmapped"] = "#bbbbbb", "#000000"
    return colors


def profile_plot(run: RunData) -> Plot:
    name, title = "profiles", "Where each step's time goes"
    caption = (
        "Each agent's timed median in the cell, split over the common classes of operations by "
        "its profile's shares (collector run --profile; `collector explain` splits a decided "
        "gap the same way); grey: outside every operation."
    )
    cells: dict[str, list[tuple[str, dict[str, float]]]] = {}
    for contender in contenders(run):
        rows = profiled_rows(run.results, contender)
        if rows.empty or not math.isfinite(contender.median_seconds):
            continue
        shares = class_shares(rows)
        parts = {c: shares[c] * contender.median_seconds for c in CLASSES if c in shares}
        label = contender.agent + (f" {contender.mode}" if contender.mode else "")
        cells.setdefault(contender.key.label(), []).append((label, parts))
    if not cells:
        return Plot(name, title, caption, note="no profiled cells in this run (--profile STEPS)")
    shown = list(cells)[:MOST_CELLS]
    if len(cells) > len(shown):
        caption += f" The first {len(shown)} of {len(cells)} profiled cells."
    height = 1.2 + 0.45 * max(len(bars) for bars in cells.values())
    figure, axes = grid(len(shown), width=6.0, height=height)
    colors, used = class_colors(), set()
    for ax, cell in zip(axes, shown, strict=False):
        bars = cells[cell]
        for index, (_, parts) in enumerate(bars):
            left = 0.0
            for op_class, seconds in parts.items():
                ax.barh(index, seconds * 1e3, left=left, color=colors[op_class])
                left += seconds * 1e3
                used.add(op_class)
        ax.set_yticks(range(len(bars)), [label for label, _ in bars], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("ms per step (timed median)")
        ax.set_title(cell, fontsize=9)
    legend = [Patch(color=colors[c], label=c) for c in CLASSES if c in used]
    figure.legend(handles=legend, loc="outside lower center", ncols=min(len(legend), 6), fontsize=8)
    return Plot(name, title, caption, png(figure))
