"""Findings as a person reads them: evidence rows, the lines at the end of `collector run`,
Markdown (`compare --format markdown`) and a Rich table (`compare`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from fwbench.collector.analysis.findings.model import (
    SUMMARY_EVIDENCE,
    SUMMARY_LINES,
    Evidence,
    Findings,
    interval_text,
)

EVIDENCE_HEADERS = (
    "agent",
    "mode",
    "cell",
    "reps",
    "median",
    "95% CI",
    "per item",
    "per-item 95% CI",
    "note",
)


def evidence_cells(evidence: Evidence) -> list[str]:
    """One evidence row under EVIDENCE_HEADERS."""
    median, per_item = evidence.median_seconds, evidence.per_item
    whole = interval_text(median, evidence.ci_low_seconds, evidence.ci_high_seconds)
    item = interval_text(*per_item)
    return [
        evidence.agent,
        evidence.mode,
        evidence.cell,
        str(len(evidence.cells)),
        whole.partition(" [")[0],
        "[" + whole.partition(" [")[2] if "[" in whole else "-",
        item.partition(" [")[0],
        "[" + item.partition(" [")[2] if "[" in item else "-",
        evidence.note,
    ]


def _short(evidence: Sequence[Evidence]) -> str:
    """The first SUMMARY_EVIDENCE of a finding's evidence in short, and how many more."""
    text = "; ".join(e.short() for e in evidence[:SUMMARY_EVIDENCE])
    more = len(evidence) - SUMMARY_EVIDENCE
    return text + (f"; {more} more" if more > 0 else "")


def summary_lines(
    found: Findings,
    limit: int = SUMMARY_LINES,
    more_from: str = "collector compare or collector report",
) -> list[str]:
    """One line per finding with its evidence in short (the end of `collector run`), at most
    `limit` and a line saying how many more and where they are (`more_from`); the none line
    when there are none."""
    if not found.findings:
        return [found.none_line]
    lines = [
        f"finding ({f.rule}): {f.statement} [{_short(f.evidence)}]" for f in found.findings[:limit]
    ]
    more = len(found.findings) - limit
    if more > 0:
        lines.append(f"... and {more} more finding(s): {more_from}")
    return lines


def markdown_lines(found: Findings) -> list[str]:
    """A Markdown section: each finding, the rule that fired and its evidence as a table."""
    lines = [f"## Findings (run {found.run_id})", ""]
    if not found.findings:
        return [*lines, found.none_line, ""]
    for number, finding in enumerate(found.findings, 1):
        lines += [f"{number}. **{finding.rule}**: {finding.statement}", ""]
        lines += [f"   Rule: {finding.rule_text}.", ""]
        lines += ["   | " + " | ".join(EVIDENCE_HEADERS) + " |"]
        lines += ["   |" + " --- |" * len(EVIDENCE_HEADERS)]
        for evidence in finding.evidence:
            cells = [c.replace("|", "\\|") for c in evidence_cells(evidence)]
            lines += ["   | " + " | ".join(cells) + " |"]
        lines += [""]
    return lines


def rich_table(found: Findings) -> Table:
    """The findings on a terminal (`collector compare`): each with its evidence in short and
    the rule that fired; check `found.findings` first (an empty run has the none line)."""
    table = Table(title=f"findings in run {found.run_id}", show_lines=True)
    for header in ("#", "rule", "finding", "evidence"):
        table.add_column(header, justify="right" if header == "#" else "left")
    for number, finding in enumerate(found.findings, 1):
        evidence = "\n".join(e.short() for e in finding.evidence)
        table.add_row(
            str(number),
            finding.rule,
            finding.statement,
            f"{evidence}\nrule: {finding.rule_text}",
        )
    return table
