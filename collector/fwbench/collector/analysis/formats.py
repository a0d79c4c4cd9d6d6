"""A ComparisonSet as a Rich table, Markdown, CSV or JSON (`collector compare --format`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Sequence
from typing import Any

import pandas as pd
from rich.table import Table
from rich.text import Text

from fwbench.collector.analysis.answers import (
    FIXED_LEVEL,
    Answers,
    footnoted,
    markdown_answers,
    repeated_phrases,
)
from fwbench.collector.analysis.comparison import ONE_PROCESS_NOTE, Comparison, ComparisonSet
from fwbench.collector.analysis.decisions import (
    DECISION_HEADERS,
    SEQUENTIAL_NOTE,
    decision_rows,
    decisions_caption,
)
from fwbench.collector.analysis.efficiency import percent_interval
from fwbench.collector.analysis.findings import Findings, markdown_lines
from fwbench.collector.analysis.history import HISTORY_NOTE
from fwbench.collector.analysis.output_format import OutputFormat as OutputFormat
from fwbench.collector.stats.significance import EQUIVALENT, FASTER, SLOWER, UNDECIDED
from fwbench.collector.store.cell_key import KEY_COLUMNS, varying_params
from fwbench.collector.verdicts.record import DecidedRun

FORMATS = tuple(OutputFormat)
ONE_PROCESS_SHORT = "one process a side: --repeat 3 (or more)"
_STYLES = {FASTER: "green", SLOWER: "red", EQUIVALENT: "cyan", UNDECIDED: "yellow"}


def record(comparison: Comparison) -> dict[str, Any]:
    """One comparison as flat JSON-ready fields (NaN becomes None)."""
    fields = {
        **comparison.key_dict(),
        "agent": comparison.agent,
        "mode": comparison.mode,
        "baseline": comparison.baseline,
        "baseline_mode": comparison.baseline_mode,
        "n": comparison.n,
        "baseline_n": comparison.baseline_n,
        "median_seconds": comparison.median_seconds,
        "baseline_median_seconds": comparison.baseline_median_seconds,
        "speedup": comparison.speedup,
        "speedup_ci_low": comparison.ci_low,
        "speedup_ci_high": comparison.ci_high,
        "p_value": comparison.p_value,
        "p_holm": comparison.p_adjusted,
        "p_equivalence": comparison.p_equivalent,
        "p_equivalence_holm": comparison.p_equivalent_adjusted,
        "method": comparison.method,
        "evidence": comparison.evidence,
        "repetitions": comparison.repetitions,
        "baseline_repetitions": comparison.baseline_repetitions,
        "noise_floor": comparison.noise_floor,
        "equivalence_margin": max(comparison.margin, comparison.noise_floor),
        "equivalence_margin_from": comparison.margin_from,
        "verdict": comparison.verdict,
        # one agent's worlds of two shapes: the speedup is the efficiency (analysis/efficiency.py)
        "measure": "efficiency" if comparison.is_scaling else "speedup",
        "scaling_verdict": comparison.shown_verdict if comparison.is_scaling else None,
        # a run measured until decided: "sequential" (its decision) or "fixed-level" (not asked)
        "verdict_from": comparison.verdict_from or FIXED_LEVEL,
        "notes": comparison.notes,
    }
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in fields.items()}


def noise_floor_text(result: ComparisonSet) -> str:
    """What the noise floor and the equivalence margin are and where they came from."""
    default = f"{result.default_floor:.1%}"
    measured = result.measured_floor
    within = (
        f"±{result.margin:.1%} (--margin)"
        if result.margin is not None
        else "the comparison's margin"
    )
    how = (
        ""
        if result.margin is not None
        else " The margin: how far apart one process of each side lay in this host's runs "
        "before the data compared, kept within 5% to 10% (5% where they did not measure both "
        "sides)."
    )
    margin = (
        f" Equivalent: the whole interval within {within} or the floor, if larger (column "
        "'floor / margin'), and the two one-sided tests still at 2.5% after Holm over the "
        f"comparisons shown.{how} Verdicts need repetitions on both sides, this host's history "
        "of both agents (--host-history) or an A/A pair; else undecided."
    )
    if measured is None:
        return (
            f"Noise floor {default} ({result.floor_source}; no A/A pair measured it): "
            "smaller differences are never called." + margin
        )
    pairs = sorted({f"{m.agent} / {m.other}" for m in result.noise})
    cells = len({m.key for m in result.noise})
    return (
        f"A/A ({', '.join(pairs)}; {cells} cells): the same agent differed from "
        f"itself by at most {measured:.1%}. Noise floor per cell: the larger of {default} and "
        "that cell's A/A difference; smaller differences are never called." + margin
    )


def _p(value: float) -> str:
    return "-" if math.isnan(value) else (f"{value:.2g}" if value >= 1e-4 else "<1e-4")


def row_cells(
    comparison: Comparison, shown: Collection[str] = (), against: bool = False
) -> list[str]:
    """One comparison's table row; `shown`: the swept shape parameters its cell names;
    `against`: the row names its baseline (a set whose rows each have their own)."""
    mode = comparison.mode
    if comparison.baseline_mode and comparison.baseline_mode != mode:
        mode = f"{mode} (vs {comparison.baseline_mode})"
    return [
        comparison.key.label(shown),
        f"{comparison.agent} vs {comparison.baseline}" if against else comparison.agent,
        mode,
        f"{comparison.median_seconds * 1e3:.3f}",
        f"{comparison.baseline_median_seconds * 1e3:.3f}",
        *_ratio_cells(comparison),
        _p(comparison.p_adjusted),
        f"{comparison.noise_floor:.1%} / ±{comparison.margin:.1%}",
        f"{comparison.repetitions}/{comparison.baseline_repetitions}",
        _verdict(comparison),
        comparison.notes,
    ]


def _ratio_cells(comparison: Comparison) -> list[str]:
    """The speedup and its interval; a scaling's efficiency as percentages."""
    low, high = comparison.ci_low, comparison.ci_high
    if comparison.is_scaling:
        value, _, interval = percent_interval(comparison.speedup, low, high).partition(" ")
        return [f"eff {value}", interval]
    return [f"{comparison.speedup:.3f}x", f"[{low:.3f}, {high:.3f}]"]


def _verdict(comparison: Comparison) -> str:
    """The verdict, and in a run measured until decided where it came from (answers.py)."""
    source, said = comparison.verdict_from, comparison.shown_verdict
    return f"{said} ({source})" if source else said


HEADERS = (
    "cell",
    "agent",
    "mode",
    "median ms",
    "baseline ms",
    "speedup",
    "95% CI",
    "p (Holm)",
    "floor / margin",
    "reps",
    "verdict",
    "notes",
)


def rich_table(result: ComparisonSet) -> Table:
    table = Table(title=result.title, caption=noise_floor_text(result))
    for header in HEADERS:
        right = header in ("median ms", "baseline ms", "speedup", "p (Holm)", "floor / margin")
        table.add_column(header, justify="right" if right else "left")
    shown = varying_params(c.key for c in result.comparisons)
    # A long note on several rows is said once, under the table (answers.footnoted).
    notes, said = footnoted(
        [_terminal_notes(c.notes) for c in result.comparisons], repeated_phrases()
    )
    for comparison, note in zip(result.comparisons, notes, strict=True):
        cells: list[str | Text] = list(row_cells(comparison, shown, result.per_row_baseline))
        verdict_at = HEADERS.index("verdict")
        cells[verdict_at] = Text(_verdict(comparison), style=_STYLES.get(comparison.verdict, ""))
        # On a terminal the caption says it once ("Verdicts need repetitions ..."): a row of
        # a run of one process a side would otherwise wrap to 16 lines for it.
        cells[-1] = note
        table.add_row(*cells)
    if said:
        table.caption = "\n".join([str(table.caption), *said])
    return table


# The host history's note without its counts of runs and processes (JSON, CSV, Markdown and
# the report keep them): "host history (SD between processes): a 4.4% (7 runs, 94 processes),
# b 9.1% (7, 37)" -> "host history, SD between processes: a 4.4%, b 9.1%".
_HISTORY_COUNTS = re.compile(r" \((\d+ runs, \d+ processes|\d+, \d+)\)")


def _terminal_notes(notes: str) -> str:
    short = notes.replace(ONE_PROCESS_NOTE, ONE_PROCESS_SHORT)
    if HISTORY_NOTE not in short:
        return short
    head, _, tail = short.partition(HISTORY_NOTE)
    return head + "host history, SD between processes: " + _HISTORY_COUNTS.sub("", tail, count=2)


def markdown(
    result: ComparisonSet,
    decided: DecidedRun | None = None,
    found: Sequence[Findings] = (),
    answered: Answers | None = None,
) -> str:
    """`found`: each run's findings (analysis/findings/), a section each after the rest;
    `answered`: what the comparisons found (answers.py), first."""
    lines = markdown_answers(answered) if answered is not None else []
    lines += [f"## {result.title}", "", noise_floor_text(result), ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + " --- |" * len(HEADERS)]
    shown = varying_params(c.key for c in result.comparisons)
    rows = [row_cells(c, shown, result.per_row_baseline) for c in result.comparisons]
    notes, said = footnoted([row[-1] for row in rows], repeated_phrases(decided))
    for row, note in zip(rows, notes, strict=True):
        lines.append("| " + " | ".join([*row[:-1], note]) + " |")
    lines += [f"- {note}" for note in said]
    lines += [f"- not compared: {reason}" for reason in result.skipped]
    lines += [f"- changed: {change}" for change in result.changes]
    if decided is not None:
        lines += ["", f"## Measured until decided (baseline {decided.baseline})", ""]
        lines += [decisions_caption(decided), "", SEQUENTIAL_NOTE, ""]
        lines += ["| " + " | ".join(DECISION_HEADERS) + " |", "|" + " --- |" * 7]
        lines += ["| " + " | ".join(cells) + " |" for cells, _ in decision_rows(decided)]
    for findings in found:
        lines += ["", *markdown_lines(findings)]
    return "\n".join(lines) + "\n"


def csv(result: ComparisonSet) -> str:
    return str(pd.DataFrame([record(c) for c in result.comparisons]).to_csv(index=False))


def json_text(
    result: ComparisonSet,
    decided: DecidedRun | None = None,
    found: Sequence[Findings] = (),
    answered: Answers | None = None,
) -> str:
    """`decided`: the run's until-decided record (its sequential decisions), when it has one;
    `found`: each run's findings (analysis/findings/); `answered`: what the comparisons
    found (answers.py)."""
    document = {
        "answers": answered.record() if answered is not None else None,
        "title": result.title,
        "basis": result.basis,  # two runs of other hosts: "peak fraction" (analysis/hosts.py)
        "hosts": result.run_hosts,
        "changes": result.changes,  # two runs: what differs besides the times (changes.py)
        "default_noise_floor": result.default_floor,
        "equivalence_margin": result.margin,
        "measured_noise_floor": result.measured_floor,
        "noise_floor": noise_floor_text(result),
        "aa": [
            {
                **dict(zip(KEY_COLUMNS, m.key, strict=True)),
                "agent": m.agent,
                "other": m.other,
                "mode": m.mode,
                "speedup": m.speedup,
                "ci_low": m.ci_low,
                "ci_high": m.ci_high,
                "difference": m.difference,
            }
            for m in result.noise
        ],
        "comparisons": [record(c) for c in result.comparisons],
        "skipped": result.skipped,
        "until_decided": decided.record() if decided is not None else None,
        "findings": [{"run_id": f.run_id, **x.record()} for f in found for x in f.findings],
        "findings_checked": {f.run_id: f.checked for f in found},
    }
    return json.dumps(document, indent=2)
