"""Comparisons at a glance on a terminal and in `compare --format markdown`: the view of
analysis/answers/glance.py, one line per comparison, fitted to the terminal's columns, with
how the rounds ended and the findings in short under it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fwbench.collector.cli.common import console

if TYPE_CHECKING:
    from fwbench.collector.analysis.answers import Answers
    from fwbench.collector.analysis.comparison import ComparisonSet
    from fwbench.collector.analysis.findings import Findings
    from fwbench.collector.verdicts.record import DecidedRun

FINDING_LINES = 3  # findings said in short under the comparisons; --verbose: all


def show_glance(
    result: ComparisonSet, decided: DecidedRun | None, found: Sequence[Findings] = ()
) -> None:
    """The comparisons one line each (analysis/answers/glance.py), what was not compared or
    changed, how the rounds ended, and the findings in short."""
    from fwbench.collector.analysis.answers.glance import glance, text_lines
    from fwbench.collector.analysis.decisions import rounds_line
    from fwbench.collector.analysis.findings import summary_lines

    view = glance(result, decided)
    said = [
        *text_lines(view, _width()),
        *(f"not compared: {reason}" for reason in result.skipped),
        *(f"changed: {change}" for change in result.changes),
        *([rounds_line(decided, view.notes)] if decided is not None else []),
    ]
    for findings in found:
        more = "collector compare --verbose"
        said += [
            f"run {findings.run_id}: {x}" for x in summary_lines(findings, FINDING_LINES, more)
        ]
    for line in said:  # one line each: a long one is the terminal's to wrap, at its width
        console.print(line, highlight=False, soft_wrap=True)


def glance_markdown(result: ComparisonSet, decided: DecidedRun | None, answered: Answers) -> str:
    """compare --format markdown: the answers, one line per comparison and each reason once."""
    from fwbench.collector.analysis.answers import markdown_answers
    from fwbench.collector.analysis.answers.glance import glance, markdown_lines
    from fwbench.collector.analysis.decisions import rounds_line

    view = glance(result, decided)
    lines = [*markdown_answers(answered), *markdown_lines(view)]
    lines += [f"- not compared: {reason}" for reason in result.skipped]
    lines += [f"- changed: {change}" for change in result.changes]
    if decided is not None:
        lines += ["", rounds_line(decided, view.notes)]
    return "\n".join(lines).rstrip() + "\n"


def _width() -> int:
    """The columns to fit: $COLUMNS where it says (also when the output is a file or a
    pipe), else the console's."""
    given = os.environ.get("COLUMNS", "")
    return int(given) if given.isdigit() and int(given) > 0 else console.width
