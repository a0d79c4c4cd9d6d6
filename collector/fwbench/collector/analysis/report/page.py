"""`collector report RUN`: a self-contained HTML page (every plot embedded as a base64 PNG, no
external URL) and a Markdown summary next to its PNG files, from one run in the store."""

from __future__ import annotations

import base64
import datetime as dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2

from fwbench.collector.analysis import formats
from fwbench.collector.analysis.answers import (
    answers,
    answers_title,
    footnoted,
    markdown_answers,
    repeated_phrases,
    with_decisions,
)
from fwbench.collector.analysis.answers.found import grouped
from fwbench.collector.analysis.answers.glance import HEADERS as GLANCE_HEADERS
from fwbench.collector.analysis.answers.glance import glance
from fwbench.collector.analysis.answers.glance import markdown_lines as glance_markdown
from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.comparison import ComparisonSet
from fwbench.collector.analysis.contenders import RunData, contenders
from fwbench.collector.analysis.decisions import (
    DECISION_HEADERS,
    SEQUENTIAL_NOTE,
    decision_rows,
    decisions_caption,
    rounds_line,
    stored_decisions,
)
from fwbench.collector.analysis.findings import EVIDENCE_HEADERS, evidence_cells, find
from fwbench.collector.analysis.history import HostHistory
from fwbench.collector.analysis.one_agent import NothingToCompare, to_compare
from fwbench.collector.analysis.report import data, figures
from fwbench.collector.analysis.report.distributed import distributed_section, scaling_plot
from fwbench.collector.analysis.report.generation import generation_plots
from fwbench.collector.analysis.report.model_outputs import model_section
from fwbench.collector.analysis.report.profiles import profile_plot
from fwbench.collector.analysis.report.roofline import roofline
from fwbench.collector.analysis.report.statistics import STATISTICS_HEADERS, statistics_rows
from fwbench.collector.stats.samples import MIN_SAMPLES, NOISY_CV, TUKEY_K
from fwbench.collector.stats.significance import ALPHA, DEFAULT_NOISE_FLOOR
from fwbench.collector.store.cell_key import varying_params
from fwbench.collector.store.reasons import reason_lines
from fwbench.collector.verdicts.families import FAMILY

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("fwbench.collector.analysis.report", "templates"),
    autoescape=jinja2.select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
    undefined=jinja2.StrictUndefined,
)
_TEMPLATES.filters["md"] = lambda value: str(value).replace("|", "\\|").replace("\n", " ")


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    markdown: Path
    figures: list[Path]


def default_baseline(run: RunData) -> str:
    """The baseline the run was measured until decided against (an agent, or "family"), else
    the first agent that measured anything (in execution order)."""
    cells = contenders(run)
    if not cells:
        raise ValueError(f"run {run.run_id} has no measured cells to report on")
    decided = stored_decisions(run.metadata)
    if decided is not None and decided.baseline:
        return decided.baseline
    return min(cells, key=lambda c: c.first_cell).agent


def _plots(run: RunData, result: ComparisonSet, baseline: str) -> list[figures.Plot]:
    summary = data.cell_summary(run)
    palette = figures.colors(list(dict.fromkeys(c.agent for c in contenders(run))))
    return [
        figures.relative_time(result, baseline, palette),
        figures.versus_batch(summary, palette, "latency"),
        figures.versus_batch(summary, palette, "throughput"),
        roofline(run, palette),
        figures.distributions(run, summary, palette),
        figures.power_energy(run, palette),
        figures.resources(data.resource_table(run)),
        figures.time_to_accuracy(run, palette),
        *generation_plots(run, palette),
        scaling_plot(run),
        profile_plot(run),
    ]


def _repetitions(metadata: dict[str, Any]) -> str:
    """How many times each cell ran, and in which processes (runs before fresh processes
    existed kept one process per agent); a run measured until decided says its rounds (its
    `selection.repeat` is 1: the rounds were not fixed in advance)."""
    decided = stored_decisions(metadata)
    if decided is not None:
        return (
            f"until decided, {decided.rounds} rounds (a fresh process each; a cell stops "
            "once its comparisons are decided)"
        )
    selection = metadata.get("selection", {})
    repeat = int(selection.get("repeat", 1))
    if repeat <= 1:
        return "1"
    fresh = selection.get("fresh_process", False)
    return f"{repeat} ({'a fresh process per repetition' if fresh else 'one process per agent'})"


def _decisions(metadata: dict[str, Any]) -> dict[str, Any] | None:
    decided = stored_decisions(metadata)
    if decided is None:
        return None
    return {
        "baseline": decided.baseline,
        "rounds": rounds_line(decided),
        "caption": decisions_caption(decided),
        "note": SEQUENTIAL_NOTE,
        "headers": list(DECISION_HEADERS),
        "rows": [cells for cells, _ in decision_rows(decided)],
    }


def _findings(run: RunData) -> dict[str, Any]:
    """The run's findings (analysis/findings/), each with its evidence as table rows."""
    found = find(run)
    return {
        "none": found.none_line if not found.findings else "",
        "headers": list(EVIDENCE_HEADERS),
        "items": [
            {
                "rule": f.rule,
                "statement": f.statement,
                "rule_text": f.rule_text,
                "rows": [evidence_cells(e) for e in f.evidence],
            }
            for f in found.findings
        ],
    }


def _context(
    run: RunData, result: ComparisonSet, baseline: str, alone: NothingToCompare | None
) -> dict[str, Any]:
    metadata = run.metadata
    environments = data.environments(run)
    shown = varying_params(c.key for c in result.comparisons)
    comparison_rows = [
        formats.row_cells(c, shown, result.per_row_baseline) for c in result.comparisons
    ]
    # What the run found opens the page; a long note of many rows is said once, under them.
    decided = stored_decisions(metadata)
    title = answers_title(run.run_id, baseline, decided)
    # One agent: the page says so where its comparisons would be, never compares it with itself.
    nothing = ""
    if alone is not None:
        title = f"What run {run.run_id} found"
        nothing = f"Nothing to compare: {alone.agent} is the only agent in this run; "
        nothing += to_compare(alone.agent) + "."
    found = answers(result, title, decided, str(metadata.get("command") or ""), run=run)
    opening = [f"## {title}", "", nothing] if nothing else markdown_answers(found)
    notes, said = footnoted([row[-1] for row in comparison_rows], repeated_phrases(decided))
    comparison_rows = [[*row[:-1], note] for row, note in zip(comparison_rows, notes, strict=True)]
    view = glance(result, decided)
    return {
        "answers": found,
        "answer_lines": grouped(found.decided),
        "glance": view,
        "glance_headers": GLANCE_HEADERS,
        "glance_markdown": "\n".join(glance_markdown(view)[2:]).strip(),
        "answers_markdown": "\n".join(opening).strip(),
        "nothing_to_compare": nothing,
        "run_id": run.run_id,
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": metadata.get("command", ""),
        "started": metadata.get("started_at", ""),
        "finished": metadata.get("finished_at", ""),
        "status": metadata.get("status", ""),
        "host": metadata.get("host", {}),
        "repeat": _repetitions(metadata),
        "baseline": "each agent's family's native agent" if baseline == FAMILY else baseline,
        "title": result.title,
        "noise_floor": formats.noise_floor_text(result),
        "comparison_headers": list(formats.HEADERS),
        "comparisons": comparison_rows,
        "comparison_notes": said,
        "skipped": result.skipped,
        "decisions": _decisions(metadata),
        "findings": _findings(run),
        "distributed": distributed_section(run),
        "model_outputs": model_section(run),
        "statistics_headers": STATISTICS_HEADERS,
        "statistics": statistics_rows(run),
        "not_measured": reason_lines(run.results.to_dict("records"), run.run_id),
        "environment_headers": list(environments.columns),
        "environments": environments.astype(str).values.tolist(),
        "rules": {
            "alpha": ALPHA,
            "default_floor": f"{DEFAULT_NOISE_FLOOR:.0%}",
            "noisy_cv": f"{NOISY_CV:.0%}",
            "min_samples": MIN_SAMPLES,
            "tukey": TUKEY_K,
        },
    }


def write_report(
    run: RunData,
    out_dir: Path,
    baseline: str | None = None,
    history: HostHistory | None = None,
    margins: HostHistory | None = None,
) -> ReportFiles:
    """Writes report.html, report.md and figures/*.png under `out_dir`; returns their paths.
    `history`: the host's, for comparisons of one process a side; `margins`: its spreads
    before the run, for the equivalence margins (compare.py). Raises
    ValueError when the run has nothing measured, ComparisonError for an unknown baseline."""
    baseline = baseline or default_baseline(run)
    alone = None
    try:
        result = compare_to_baseline(run, baseline, history=history, margins=margins)
    except NothingToCompare as error:
        result, alone = ComparisonSet(f"run {run.run_id}", [], [], DEFAULT_NOISE_FLOOR, []), error
    result = with_decisions(result, stored_decisions(run.metadata))  # one answer per question
    plots = _plots(run, result, baseline)
    context = _context(run, result, baseline, alone)
    figure_dir = out_dir / "figures"
    figure_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for plot in plots:
        if plot.png is not None:
            path = figure_dir / f"{plot.name}.png"
            path.write_bytes(plot.png)
            written.append(path)
    html = _TEMPLATES.get_template("report.html.j2").render(
        **context,
        plots=[
            {**plot.__dict__, "data": base64.b64encode(plot.png).decode() if plot.png else ""}
            for plot in plots
        ],
    )
    markdown = _TEMPLATES.get_template("report.md.j2").render(**context, plots=plots)
    (out_dir / "report.html").write_text(html, encoding="utf-8")
    (out_dir / "report.md").write_text(markdown, encoding="utf-8")
    return ReportFiles(out_dir / "report.html", out_dir / "report.md", written)
