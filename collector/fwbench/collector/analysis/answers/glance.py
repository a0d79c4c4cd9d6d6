"""Comparisons at a glance: one line each (cell, agent, speedup, interval, verdict and the
marks of its reasons), the reasons said once each as numbered notes under the table, as
benchstat and `pyperf compare_to` do. `collector compare`, the end of `collector run`, the
Markdown and the HTML report show this view; `compare --verbose`, `--format json` and
`--format csv` keep every figure and every note of every row.

A reason that differs from row to row only in its figures (how many interfered processes
were left out, a margin's SD) is said in general words once; --verbose says each row's.
An interval spanning more than UNBOUNDED_RATIO (its high over its low), or without finite
bounds, is said to be unbounded: from too few processes to mean anything."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from fwbench.collector.analysis.answers.build import cell_namer, decision_for
from fwbench.collector.analysis.answers.found import SEQUENTIAL, STYLES
from fwbench.collector.analysis.comparison import Comparison, ComparisonSet
from fwbench.collector.analysis.efficiency import percent_interval
from fwbench.collector.analysis.history import HISTORY_NOTE
from fwbench.collector.stats.significance import EQUIVALENT
from fwbench.collector.store.interference_columns import UNKNOWN
from fwbench.collector.verdicts.record import DecidedRun

HEADERS = ("cell", "agent", "speedup", "95% interval", "verdict", "notes")
UNBOUNDED_RATIO = 100.0
UNBOUNDED = "unbounded"
UNBOUNDED_NOTE = (
    f"unbounded: the interval spans more than {UNBOUNDED_RATIO:.0f}x (or has no finite "
    "bound), from too few processes to bound anything"
)
NOT_MEASURED = "none (no look)"
VERBOSE = "`collector compare RUN --verbose` gives each row's"
# A reason whose figures change from row to row, and its words for all of them.
_GENERAL = (
    (
        re.compile(r"^\d+ interfered process(es)? (was|were) left out and measured again.*"),
        f"interfered processes were left out and measured again ({VERBOSE})",
    ),
    (
        re.compile(r"^one agent's processes differed by .*"),
        f"the processes of one agent differed from each other ({VERBOSE} SD)",
    ),
    (
        re.compile(r"^(margin \S+ )?by default: (.*) did not measure how far apart .*"),
        r"\1by default: \2 did not measure how far apart these agents' processes lie in the "
        "cell",
    ),
    (
        re.compile(r"^(margin \S+ )?from (.*?): one process of each side lies .*"),
        rf"margin from \2: how far apart one process of each side lay ({VERBOSE})",
    ),
    (
        re.compile("^" + re.escape(UNKNOWN) + " for .*?: (.*)"),
        UNKNOWN + r" for some of the processes compared: \1",
    ),
    (
        re.compile("^" + re.escape(HISTORY_NOTE) + ".*"),
        f"leans on this host's history of how much these agents' processes differ ({VERBOSE})",
    ),
)


@dataclass(frozen=True)
class GlanceRow:
    cell: str  # "" where it is the row above's
    agent: str
    speedup: str
    interval: str
    verdict: str  # with an equivalence's margin
    bare_verdict: str  # for colour
    marks: tuple[int, ...]  # numbers of the notes

    @property
    def cells(self) -> list[str]:
        marks = ",".join(str(m) for m in self.marks)
        return [self.cell, self.agent, self.speedup, self.interval, self.verdict, marks]


@dataclass(frozen=True)
class Glance:
    title: str
    rows: list[GlanceRow]
    notes: list[str]  # note i + 1 is marked i + 1


def general(reason: str) -> str:
    """A reason in the words every row it applies to shares."""
    for pattern, words in _GENERAL:
        if pattern.match(reason):
            return pattern.sub(words, reason)
    return reason


def interval_text(low: float | None, high: float | None, percent: bool = False) -> str:
    """ "[0.670, 0.768]"; in words where it has no bounds worth the name."""
    if low is None or high is None or math.isnan(low) or math.isnan(high):
        return NOT_MEASURED
    if low <= 0 or not math.isfinite(high) or high / low > UNBOUNDED_RATIO:
        return UNBOUNDED
    if percent:
        return "[" + percent_interval(low, low, high).partition("[")[2]
    return f"[{low:.3f}, {high:.3f}]"


def glance(result: ComparisonSet, decided: DecidedRun | None = None) -> Glance:
    """`result` after answers.with_decisions; `decided`: the run's until-decided record,
    whose decisions give the figures of the verdicts they made."""
    name = cell_namer([c.key for c in result.comparisons])
    modes: dict[str, set[str]] = {}
    for comparison in result.comparisons:
        modes.setdefault(comparison.agent, set()).add(comparison.mode)
    ordered = sorted(
        enumerate(result.comparisons),
        key=lambda pair: ([c.key for c in result.comparisons].index(pair[1].key), pair[0]),
    )
    notes: list[str] = []
    rows, last_cell = [], None
    for _, comparison in ordered:
        cell = name(comparison.key)
        speedup, low, high, within = _figures(comparison, decided)
        interval = interval_text(low, high, comparison.is_scaling)
        reasons = [*comparison.reasons, UNBOUNDED_NOTE if interval == UNBOUNDED else ""]
        marks = []
        for reason in dict.fromkeys(general(r) for r in reasons if r):
            if reason not in notes:
                notes.append(reason)
            marks.append(notes.index(reason) + 1)
        agent = comparison.agent
        if len(modes[agent]) > 1 or comparison.mode != comparison.baseline_mode:
            agent += f" ({comparison.mode})" if comparison.mode else ""
        if result.per_row_baseline:
            agent += f" vs {comparison.baseline}"
        rows.append(
            GlanceRow(
                "" if cell == last_cell else cell,
                agent,
                _speedup_text(speedup, comparison.is_scaling),
                interval,
                _verdict_text(comparison, within),
                comparison.verdict,
                tuple(marks),
            )
        )
        last_cell = cell
    return Glance(result.title, rows, notes)


def _figures(
    comparison: Comparison, decided: DecidedRun | None
) -> tuple[float | None, float | None, float | None, float]:
    """A sequential verdict's own figures (its last look's) and equivalence margin; else
    the comparison's."""
    within = max(comparison.margin, comparison.noise_floor)
    if comparison.verdict_from == SEQUENTIAL and decided is not None:
        found = decision_for(comparison, decided.decisions)
        if found is not None:
            decision, inverted = found
            _, speedup, low, high = decision.oriented(inverted)
            margin = decided.margin_of(decision)
            return speedup, low, high, within if margin is None else margin
    return comparison.speedup, comparison.ci_low, comparison.ci_high, within


def _speedup_text(speedup: float | None, scaling: bool) -> str:
    if speedup is None or math.isnan(speedup):
        return "-"
    return f"eff {speedup:.0%}" if scaling else f"{speedup:.3f}x"


def _verdict_text(comparison: Comparison, within: float) -> str:
    said = comparison.shown_verdict
    if comparison.verdict == EQUIVALENT:
        said += f" ±{within:.1%}"
    return said


def text_lines(view: Glance, width: int) -> list[Text]:
    """The view for a terminal of `width` columns, every name and figure whole: one line a
    row where that fits; else each cell on a line of its own with its rows under it. The
    notes follow, numbered; a long one wraps at words (the console wraps it)."""
    rows = [row.cells for row in view.rows]
    flat = _widths([HEADERS, *rows])
    grouped = width < sum(flat) + 2 * (len(flat) - 1)
    columns = HEADERS[1:] if grouped else HEADERS
    widths = _widths([columns, *(r[1:] if grouped else r for r in rows)])
    right = {"speedup"}
    lines = [Text(view.title, style="bold")]

    def line(cells: list[str], style: str = "", verdict: str = "") -> Text:
        text = Text("  " if grouped else "", style=style)
        for column, value, size in zip(columns, cells, widths, strict=True):
            padded = value.rjust(size) if column in right else value.ljust(size)
            text.append(padded, style=STYLES.get(verdict, "") if column == "verdict" else "")
            text.append("  ")
        text.rstrip()
        return text

    lines.append(line(list(columns), style="bold"))
    for row, cells in zip(view.rows, rows, strict=True):
        if grouped and row.cell:
            lines.append(Text(row.cell, style="bold"))
        lines.append(line(cells[1:] if grouped else cells, verdict=row.bare_verdict))
    lines += [Text(f"{number}: {note}") for number, note in enumerate(view.notes, start=1)]
    return lines


def markdown_lines(view: Glance) -> list[str]:
    """The view as a Markdown table and its numbered notes."""
    lines = [f"### {view.title}", "", "| " + " | ".join(HEADERS) + " |"]
    lines.append("|" + " --- |" * len(HEADERS))
    lines += ["| " + " | ".join(row.cells) + " |" for row in view.rows]
    if view.notes:
        lines += ["", *(f"{n}. {note}" for n, note in enumerate(view.notes, start=1))]
    return [*lines, ""]


def _widths(table: list[Any]) -> list[int]:
    return [max(len(str(row[i])) for row in table) for i in range(len(table[0]))]
