"""The report's generation plots (workloads of kind "generation", docs/transformers.md):
decode tokens per second against batch size, time to first token against prompt length, and
the fraction of the host's calibrated memory bandwidth decoding reached. Each says why it has
nothing to draw instead of failing."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report.figures import Plot, grid, png

_SHAPE_SKIPPED = ("prompt_len",)  # the x axis of the prompt plot, not a panel of its own


def generation_rows(run: RunData) -> pd.DataFrame:
    """The run's ok generation rows, labelled by agent (and mode where the agent ran several),
    with their shape without the batch (`shape`) and without the prompt (`others`)."""
    table = run.results
    if table.empty or "decode_tokens_per_second" not in table:
        return pd.DataFrame()
    rows = table[(table["status"] == "ok") & (table["kind"] == "generation")].copy()
    if rows.empty:
        return rows
    modes = rows.groupby("agent")["mode"].nunique()
    rows["label"] = [
        f"{agent} ({mode})" if modes[agent] > 1 else agent
        for agent, mode in zip(rows["agent"], rows["mode"], strict=True)
    ]
    varying = _varying(rows["params"])
    rows["shape"] = [_shape(p, varying) for p in rows["params"]]
    rows["others"] = [_shape(p, varying - set(_SHAPE_SKIPPED)) for p in rows["params"]]
    return rows


def _varying(params: pd.Series) -> set[str]:
    """The parameters that differ between the rows: a panel is named by those alone."""
    seen: dict[str, set[object]] = {}
    for text in params:
        for name, value in json.loads(text or "{}").items():
            seen.setdefault(name, set()).add(value)
    return {name for name, values in seen.items() if len(values) > 1}


def _shape(params: str, shown: set[str]) -> str:
    values = json.loads(params or "{}")
    named = " ".join(f"{k}={v}" for k, v in sorted(values.items()) if k in shown)
    return named or "every cell"


def _lines(
    rows: pd.DataFrame,
    panel: str,
    x: str,
    y: str,
    axes_labels: tuple[str, str],
    palette: dict[str, str],
    scale: float = 1.0,
) -> bytes:
    """One panel per value of `panel`, a line per label: the median `y` at each `x`."""
    panels = list(dict.fromkeys(rows[panel]))
    figure, axes = grid(len(panels), height=3.6)
    for ax, value in zip(axes, panels, strict=True):
        part = rows[rows[panel] == value]
        for label, lines in part.groupby("label", sort=False):
            lines = lines.groupby(x, as_index=False)[y].median().sort_values(x)
            color = palette.get(str(label).split(" (")[0], "#888888")
            ax.plot(lines[x], lines[y] * scale, "o-", label=label, color=color)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(axes_labels[0])
        ax.set_ylabel(axes_labels[1])
        ax.set_title(str(value), fontsize=8)
        ax.legend(fontsize=8)
    return png(figure)


TOKENS = Plot(
    "decode_tokens",
    "Decode tokens per second vs batch size",
    "Tokens the decode steps produced per second (batch x decode steps over their time, the "
    "median sample), one panel per model shape; decode reads every weight once a step, so a "
    "bigger batch shares that cost.",
)
FIRST_TOKEN = Plot(
    "time_to_first_token",
    "Time to first token vs prompt length",
    "Median prefill time (the prompt's forward pass and the first token), one panel per model "
    "shape and batch size.",
)
BANDWIDTH = Plot(
    "decode_bandwidth",
    "Decode bandwidth: fraction of this host's memory bandwidth",
    "Bytes a decode step must move (every weight once, the KV cache so far: the catalogue's "
    "minimum-traffic model) per second, over the host's calibrated triad bandwidth at the "
    "row's threads; 1 is the physical limit.",
)


def generation_plots(run: RunData, palette: dict[str, str]) -> list[Plot]:
    rows = generation_rows(run)
    if rows.empty:
        note = "no generation cells in this run"
        return [replace(p, note=note) for p in (TOKENS, FIRST_TOKEN, BANDWIDTH)]
    tokens = _lines(
        rows,
        "shape",
        "batch_size",
        "decode_tokens_per_second",
        ("batch size", "decode tokens / s"),
        palette,
    )
    plots = [replace(TOKENS, png=tokens)]
    batch = "batch=" + rows["batch_size"].astype(str)
    prompts = rows.assign(others=(rows["others"] + " ").str.replace("every cell ", "") + batch)
    if prompts.groupby("others")["prompt_tokens"].nunique().max() < 2:
        note = "one prompt length per shape: sweep it with --param prompt_len=A,B,..."
        plots.append(replace(FIRST_TOKEN, note=note))
    else:
        first = _lines(
            prompts,
            "others",
            "prompt_tokens",
            "time_to_first_token_seconds",
            ("prompt tokens", "time to first token (ms)"),
            palette,
            scale=1e3,
        )
        plots.append(replace(FIRST_TOKEN, png=first))
    fractions = rows[rows["decode_bandwidth_fraction"].notna()]
    if fractions.empty:
        note = "no row has a calibrated bandwidth (GPU rows, other hosts)"
        plots.append(replace(BANDWIDTH, note=note))
    else:
        fraction = _lines(
            fractions,
            "shape",
            "batch_size",
            "decode_bandwidth_fraction",
            ("batch size", "fraction of calibrated bandwidth"),
            palette,
        )
        plots.append(replace(BANDWIDTH, png=fraction))
    return plots
