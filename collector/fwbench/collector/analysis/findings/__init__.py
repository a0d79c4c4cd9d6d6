"""Findings: what a run's rows say by themselves that a person should look at, with no question
asked of them (docs/report.md, "Findings"). Each finding names the rule that fired, says in one
line what was found and what to do, and carries its evidence: the rows (agent, mode, cell),
their medians with 95% intervals and their times per item.

The rules, most severe first (RULES, in that order):

- off-own-trend: a step of an agent's sweep over batch sizes that takes more than
  OFF_TREND_FACTOR times as long as the step of the next larger batch size (which does more
  work), beyond both intervals: one cell far off the agent's own trend (tf-mkl's resnet18
  inference at batch size 1, 10 to 12 times batch size 2's step on an AMD EPYC, issue 36);
- off-other-agents: in one cell, the ratio of two agents' times more than OFF_OTHERS_FACTOR
  times off its ratio in the sweep's other cells (at least MIN_OTHER_CELLS of them, agreeing
  within OTHERS_AGREE), beyond the intervals;
- past-ceiling: a row above the calibrated ceiling (peak_fraction or decode_bandwidth_fraction
  above 1, or a row that raised the run's calibrated ceiling): the ceiling is wrong, or the
  row is;
- batch-backwards: time per item at a larger batch size higher than at a smaller one, by at
  least BACKWARDS_MIN, beyond both intervals;
- threads-backwards: time per step at more threads higher than at fewer, the same way;
- interfered: rows measured while other processes used the agent's CPUs;
- settings-mismatch: rows that ran otherwise than asked.

Only ok rows are measurements. The scaling and agent rules use only rows that ran as asked and
were not interfered: a finding never rests on a row the tool already distrusts (those rows
have findings of their own). One anomaly gives one finding: a cell off its own trend gets
none from the other agents', and a cell either names is left out of the backwards pairs (a
cell 10x slow at batch size 1 is not also a backwards pair and an agent far off the others).

Repetitions of a cell are pooled: its median is that of every repetition's samples together,
its interval spans its repetitions' intervals (the lowest low to the highest high), wider than
the cluster bootstrap's and computed from the stored columns alone, so findings are cheap
enough for the end of a run and never rest on one repetition's luck."""

from __future__ import annotations

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.findings.agents import agent_findings
from fwbench.collector.analysis.findings.cells import measured_cells, ok_rows
from fwbench.collector.analysis.findings.model import (
    BACKWARDS_MIN,
    BATCH_BACKWARDS,
    CEILING,
    CHECKED,
    INTERFERED,
    MIN_OTHER_CELLS,
    OFF_OTHERS,
    OFF_OTHERS_FACTOR,
    OFF_TREND,
    OFF_TREND_FACTOR,
    OTHERS_AGREE,
    PAST_CEILING,
    RULES,
    SETTINGS_MISMATCH,
    SUMMARY_EVIDENCE,
    SUMMARY_LINES,
    THREADS_BACKWARDS,
    Evidence,
    Finding,
    Findings,
    interval_text,
)
from fwbench.collector.analysis.findings.rows import ceiling_findings, marked_findings
from fwbench.collector.analysis.findings.scaling import (
    backwards_findings,
    thread_findings,
    trend_findings,
)
from fwbench.collector.analysis.findings.show import (
    EVIDENCE_HEADERS,
    evidence_cells,
    markdown_lines,
    rich_table,
    summary_lines,
)
from fwbench.collector.store.cell_key import CellKey, varying_params

__all__ = [
    "BACKWARDS_MIN",
    "BATCH_BACKWARDS",
    "CEILING",
    "CHECKED",
    "EVIDENCE_HEADERS",
    "INTERFERED",
    "MIN_OTHER_CELLS",
    "OFF_OTHERS",
    "OFF_OTHERS_FACTOR",
    "OFF_TREND",
    "OFF_TREND_FACTOR",
    "OTHERS_AGREE",
    "PAST_CEILING",
    "RULES",
    "SETTINGS_MISMATCH",
    "SUMMARY_EVIDENCE",
    "SUMMARY_LINES",
    "THREADS_BACKWARDS",
    "Evidence",
    "Finding",
    "Findings",
    "evidence_cells",
    "find",
    "interval_text",
    "markdown_lines",
    "rich_table",
    "summary_lines",
]


def find(run: RunData) -> Findings:
    """Every rule's findings in `run`, most severe first (RULES' order, then the largest
    departure first, then by statement): the same run always gives the same list."""
    rows = ok_rows(run)
    shown = varying_params(CellKey.of_row(row) for row in rows)
    measured = measured_cells(run, rows)
    trend, off_trend = trend_findings(measured, shown)
    against, off_others = agent_findings(measured, shown, off_trend)
    odd = off_trend | off_others
    found = [
        *trend,
        *against,
        *backwards_findings(measured, shown, odd),
        *thread_findings(measured, shown, odd),
        *ceiling_findings(run, rows, shown),
        *marked_findings(rows, shown),
    ]
    order = list(RULES)
    found.sort(key=lambda f: (order.index(f.rule), -f.size, f.statement))
    agents = len({row["agent"] for row in rows})
    cells = len({(row["agent"], CellKey.of_row(row)) for row in rows})
    checked = (
        f"{cells} measured cell{'s' if cells != 1 else ''} of {agents} "
        f"agent{'s' if agents != 1 else ''} checked for {CHECKED}"
        if rows
        else "nothing was measured (no ok rows)"
    )
    return Findings(run.run_id, tuple(found), checked)
