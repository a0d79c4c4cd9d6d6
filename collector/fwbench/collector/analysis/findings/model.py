"""What a finding is (Finding: its rule, statement and Evidence), the rules' names and
texts in the order findings are listed, and their thresholds (docs/report.md,
"Findings")."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

OFF_TREND, OFF_OTHERS, PAST_CEILING = "off-own-trend", "off-other-agents", "past-ceiling"
BATCH_BACKWARDS, THREADS_BACKWARDS = "batch-backwards", "threads-backwards"
INTERFERED, SETTINGS_MISMATCH = "interfered", "settings-mismatch"

# A step of fewer items that takes more than 3x as long as the larger batch's step, even at
# the fast end of its interval against the slow end of the other's: no batch size does more
# work in a third of the time; the pathology was 10-12x.
OFF_TREND_FACTOR = 3.0
# An agent's time against another's in one cell, 3x off that pair's ratio in their other
# cells (interval edges against the other cells' whole span), when those agree within 2x and
# there are at least MIN_OTHER_CELLS of them: with one other cell nothing says which is off.
OFF_OTHERS_FACTOR = 3.0
OTHERS_AGREE = 2.0
MIN_OTHER_CELLS = 2
# Scaling backwards: the intervals apart and the medians at least 5% apart (the default
# equivalence margin). Smaller gaps can be real, but two processes of one agent commonly
# differ by as much (docs/report.md).
BACKWARDS_MIN = 0.05
CEILING = 1.0
# The end of a run lists this many findings; compare and the report list them all.
SUMMARY_LINES = 10
SUMMARY_EVIDENCE = 4  # evidence rows a summary line shows (the rest: compare, the report)

RULES = {
    OFF_TREND: (
        "a step at one batch size takes more than "
        f"{OFF_TREND_FACTOR:g}x as long as the agent's step at the next larger batch size (the "
        "fast end of its 95% interval against the slow end of the other's)"
    ),
    OFF_OTHERS: (
        "in one cell, an agent's time over another's is more than "
        f"{OFF_OTHERS_FACTOR:g}x off their ratio in at least {MIN_OTHER_CELLS} other cells of "
        f"the sweep (same workload, phase, dtype and shape), which agree within "
        f"{OTHERS_AGREE:g}x; interval edges against the other cells' whole span"
    ),
    PAST_CEILING: (
        "peak_fraction or decode_bandwidth_fraction above 1, or the row raised the run's "
        "calibrated ceiling (docs/calibration.md)"
    ),
    BATCH_BACKWARDS: (
        "time per item at a larger batch size above that at a smaller one: the 95% intervals "
        f"apart and the medians at least {BACKWARDS_MIN:.0%} apart"
    ),
    THREADS_BACKWARDS: (
        "time per step at more threads (threads_requested) above that at fewer: the 95% "
        f"intervals apart and the medians at least {BACKWARDS_MIN:.0%} apart"
    ),
    INTERFERED: "ok rows marked interfered (other processes used the agent's CPUs)",
    SETTINGS_MISMATCH: "ok rows whose settings_mismatch is set (ran otherwise than asked)",
}
CHECKED = (
    "batch and thread scaling that goes backwards, cells far off their agent's own trend or "
    "the other agents, rows past the calibrated ceiling, interference and settings other than "
    "asked"
)


@dataclass(frozen=True)
class Evidence:
    """One agent's cell as a finding shows it: repetitions pooled (the package's docstring)."""

    tag: str  # what tells it from the finding's other evidence: "bs=1", "t=4", an agent
    agent: str
    mode: str
    cell: str  # CellKey.label
    cells: tuple[int, ...]  # the rows' cell indices, in execution order
    median_seconds: float
    ci_low_seconds: float
    ci_high_seconds: float
    items_per_sample: float
    note: str = ""

    @property
    def per_item(self) -> tuple[float, float, float]:
        """Time per item: the median and its interval, each over the items of a sample."""
        items = self.items_per_sample
        return (
            self.median_seconds / items,
            self.ci_low_seconds / items,
            self.ci_high_seconds / items,
        )

    def record(self) -> dict[str, Any]:
        per_item, low, high = self.per_item
        fields = {
            "agent": self.agent,
            "mode": self.mode,
            "cell": self.cell,
            "cells": list(self.cells),
            "repetitions": len(self.cells),
            "median_seconds": self.median_seconds,
            "median_ci_low_seconds": self.ci_low_seconds,
            "median_ci_high_seconds": self.ci_high_seconds,
            "items_per_sample": self.items_per_sample,
            "per_item_seconds": per_item,
            "per_item_ci_low_seconds": low,
            "per_item_ci_high_seconds": high,
            "note": self.note,
        }
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in fields.items()}

    def short(self) -> str:
        """ "bs=1 12.1 ms [12.0, 12.3]" (per item too when a sample holds several)."""
        whole = interval_text(self.median_seconds, self.ci_low_seconds, self.ci_high_seconds)
        text = f"{self.tag} {whole}"
        if self.items_per_sample != 1:
            text += f", {interval_text(*self.per_item)} per item"
        return text + (f" ({self.note})" if self.note else "")


@dataclass(frozen=True)
class Finding:
    rule: str  # a key of RULES
    statement: str
    evidence: tuple[Evidence, ...]
    size: float = 1.0  # how far past the rule's line (a factor or fraction): orders one rule's

    @property
    def rule_text(self) -> str:
        return RULES[self.rule]

    def record(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "statement": self.statement,
            "rule_fired": self.rule_text,
            "evidence": [e.record() for e in self.evidence],
        }


@dataclass(frozen=True)
class Findings:
    run_id: str
    findings: tuple[Finding, ...]
    checked: str  # what was checked: "12 measured cells of 2 agents for ..."

    @property
    def none_line(self) -> str:
        return f"no findings: {self.checked}"


def interval_text(median: float, low: float, high: float) -> str:
    """ "12.1 ms [12.0, 12.3]": one unit, chosen by the median."""
    if any(math.isnan(v) for v in (median, low, high)):
        return "-"
    scale, unit = (1e6, "µs") if median < 1e-3 else (1e3, "ms") if median < 1 else (1, "s")
    shown = median * scale  # three figures of it, and the interval to the same decimals
    places = 0 if shown >= 100 else 1 if shown >= 10 else 2
    return f"{shown:.{places}f} {unit} [{low * scale:.{places}f}, {high * scale:.{places}f}]"
