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
from fwbench.collector.analysis.comparison import ComparisonSet
from fwbench.collector.analysis.efficiency import percent_interval
from fwbench.collector.analysis.history import HISTORY_NOTE
from fwbench.collector.stats.significance import EQUIVALENT
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.store.interference_columns import UNKNOWN
from fwbench.collector.verdicts.record import DecidedRun, Decision

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


@dataclass(frozen=True)
class _Entry:
    """One comparison's line before it is laid out: its figures and reasons in full."""

    key: CellKey
    agent: str
    speedup: float | None
    low: float | None
    high: float | None
    scaling: bool
    verdict: str  # as shown: an equivalence with its margin
    bare: str
    reasons: tuple[str, ...]


def glance(result: ComparisonSet, decided: DecidedRun | None = None) -> Glance:
    """`result` after answers.with_decisions; `decided`: the run's until-decided record,
    whose decisions give the figures of the verdicts they made. A decision no comparison of
    `result` covers (a side with no ok process: every one failed; an A/A twin against its
    own agent) has a line of its own, from its record."""
    entries, covered = _comparison_entries(result, decided)
    if decided is not None:
        entries += [_decision_entry(d, decided) for d in decided.decisions if id(d) not in covered]
    keys = list(dict.fromkeys(e.key for e in entries))
    entries.sort(key=lambda e: keys.index(e.key))  # stable: a cell's lines keep their order
    name = cell_namer(keys)
    notes: list[str] = []
    rows, last_cell = [], None
    for entry in entries:
        cell = name(entry.key)
        interval = interval_text(entry.low, entry.high, entry.scaling)
        reasons = [*entry.reasons, UNBOUNDED_NOTE if interval == UNBOUNDED else ""]
        marks = []
        for reason in dict.fromkeys(general(r) for r in reasons if r):
            if reason not in notes:
                notes.append(reason)
            marks.append(notes.index(reason) + 1)
        rows.append(
            GlanceRow(
                "" if cell == last_cell else cell,
                entry.agent,
                _speedup_text(entry.speedup, entry.scaling),
                interval,
                entry.verdict,
                entry.bare,
                tuple(marks),
            )
        )
        last_cell = cell
    return Glance(result.title, rows, notes)


def _comparison_entries(
    result: ComparisonSet, decided: DecidedRun | None
) -> tuple[list[_Entry], set[int]]:
    """Every comparison's entry, and the decisions they cover (by id)."""
    modes: dict[str, set[str]] = {}
    for comparison in result.comparisons:
        modes.setdefault(comparison.agent, set()).add(comparison.mode)
    entries, covered = [], set()
    for comparison in result.comparisons:
        speedup: float | None = comparison.speedup
        low: float | None = comparison.ci_low
        high: float | None = comparison.ci_high
        within = max(comparison.margin, comparison.noise_floor)
        found = None
        if comparison.verdict_from == SEQUENTIAL and decided is not None:
            found = decision_for(comparison, decided.decisions)
        if found is not None and decided is not None:  # the decision's own (its last look's)
            decision, inverted = found
            covered.add(id(decision))
            _, speedup, low, high = decision.oriented(inverted)
            margin = decided.margin_of(decision)
            within = within if margin is None else margin
        agent = comparison.agent
        if len(modes[agent]) > 1 or comparison.mode != comparison.baseline_mode:
            agent += f" ({comparison.mode})" if comparison.mode else ""
        if result.per_row_baseline:
            agent += f" vs {comparison.baseline}"
        shown = comparison.shown_verdict
        shown += f" ±{within:.1%}" if comparison.verdict == EQUIVALENT else ""
        entries.append(
            _Entry(
                key=comparison.key,
                agent=agent,
                speedup=speedup,
                low=low,
                high=high,
                scaling=comparison.is_scaling,
                verdict=shown,
                bare=comparison.verdict,
                reasons=comparison.reasons,
            )
        )
    return entries, covered


def _decision_entry(decision: Decision, decided: DecidedRun) -> _Entry:
    agent = decision.agent + (f" ({decision.mode})" if decision.mode else "")
    if decision.against != decided.baseline:
        agent += f" vs {decision.against}"
    shown = decision.verdict
    if decision.verdict == EQUIVALENT and (margin := decided.margin_of(decision)) is not None:
        shown += f" ±{margin:.1%}"
    return _Entry(
        key=decision.cell_key,
        agent=agent,
        speedup=decision.speedup,
        low=decision.ci_low,
        high=decision.ci_high,
        scaling=False,
        verdict=shown,
        bare=decision.verdict,
        reasons=tuple(decision.reasons()),
    )


def _speedup_text(speedup: float | None, scaling: bool) -> str:
    if speedup is None or math.isnan(speedup):
        return "-"
    return f"eff {speedup:.0%}" if scaling else f"{speedup:.3f}x"


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
