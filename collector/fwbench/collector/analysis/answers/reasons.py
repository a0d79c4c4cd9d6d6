"""Why comparisons stayed undecided, in words every comparison undecided for that reason
shares, and the command that would likely decide them: the run's own, changed where it must."""

from __future__ import annotations

import math
import shlex
from collections.abc import Iterable, Sequence
from typing import Any

from fwbench.collector.analysis.answers.found import Undecided
from fwbench.collector.analysis.comparison import (
    AA_FLOOR,
    FAILED_PROCESSES,
    HOST_HISTORY,
    NEVER_CALLED,
    ONE_PROCESS,
    OTHER_SETTINGS,
    OUTPUTS_DIFFER,
    PROCESSES,
    Comparison,
)
from fwbench.collector.stats.failures import DIFFERED_NOTE, FAILED_NOTE, OTHERWISE_NOTE
from fwbench.collector.stats.needed import (
    MOST_SUGGESTED,
    repetitions_needed,
    too_many,
    would_decide,
)
from fwbench.collector.stats.significance import DEFAULT_MARGIN, RatioEstimate
from fwbench.collector.verdicts.record import DecidedRun, Decision

ONE_PROCESS_REASON = "one process a side, nothing measures how much processes differ"
MEASURED_REASON = (
    "measured, but the interval neither clears the noise floor nor lies within the margin "
    "(each row's note: about how many repetitions a side)"
)
_REASONS = {
    ONE_PROCESS: ONE_PROCESS_REASON,
    FAILED_PROCESSES: "a process failed in the cell, and the ones that finished cannot stand "
    "for it (the rows' notes name it; its log is in the run folder)",
    OTHER_SETTINGS: "a side ran otherwise than asked (the rows' settings_mismatch): a verdict "
    "would answer another question",
    OUTPUTS_DIFFER: "a side's outputs differ from the reference's (the rows' outputs_note): "
    "it computed something else, so its speed is no answer",
}
# Options a command that would decide something replaces (with a value, unless given as
# --name=value), and those it never repeats: the folder already holds the run.
_VALUED = {"--out", "--budget", "--repeat", "--baseline", "--resume", "--margin"}
_NEVER_REPEATED = {"--out", "--resume"}


class Groups:
    """The undecided, by reason, in the order first met, each reason with its command (None:
    more processes would decide them, and how many depends on the whole group)."""

    def __init__(self) -> None:
        self.held: dict[str, list[Any]] = {}
        self.commands: dict[str, str | None] = {}

    def add(self, reason: str, command: str | None, item: Any) -> None:
        self.held.setdefault(reason, []).append(item)
        self.commands.setdefault(reason, command)

    def said(self, decided: DecidedRun | None, command: str) -> list[Undecided]:
        groups = []
        for reason, held in self.held.items():
            then, decides = self.commands[reason], None
            if then is None and decided is not None:  # held: decisions (decision_reason)
                reason, then, decides = _more_processes(reason, held, decided, command)
            groups.append(Undecided(len(held), reason, then or "", decides))
        return groups


def rerun(command: str, add: Sequence[str], drop: Iterable[str] = ()) -> str:
    """`command` (a run's own, from run.json) with `add`'s options instead of any it had of
    those names (and of `drop`), without --out and --resume; "" without a command."""
    if not command:
        return ""
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    names = {*drop, *_NEVER_REPEATED, *(w for w in add if w.startswith("--"))}
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        name = word.partition("=")[0]
        if name in names:
            skip = name in _VALUED and "=" not in word
            continue
        kept.append(word)
    return shlex.join([*kept, *add])


def comparison_reason(
    comparison: Comparison, command: str, runs: tuple[str, str] | None
) -> tuple[str, str]:
    """Why a fixed-level comparison stayed undecided, in words shared by every comparison
    undecided for that reason, and the command that would likely decide them."""
    if comparison.evidence in (PROCESSES, HOST_HISTORY, AA_FLOOR):
        reason = MEASURED_REASON
    elif comparison.evidence in _REASONS:
        reason = _REASONS[comparison.evidence]
    else:  # one the rules of compare.py added (interfered processes, ...): its own note
        reason = NEVER_CALLED.get(comparison.evidence) or comparison.notes
    if runs is not None:
        if comparison.evidence == ONE_PROCESS:
            reason = (
                "one process a run, nothing measures how much processes differ (measure each "
                "run with --repeat 3 or more)"
            )
        return reason, ""
    if comparison.evidence in (ONE_PROCESS, PROCESSES, HOST_HISTORY, AA_FLOOR):
        return reason, rerun(command, ["--until-decided", "--baseline", comparison.baseline])
    return reason, ""


def decision_reason(q: Decision, decided: DecidedRun, command: str) -> tuple[str, str | None]:
    """Why a sequential comparison stayed undecided, in words its group shares (its own
    figures are in the decisions table), and the command that would likely decide the group:
    None where more processes would (_more_processes says how many, for the whole group)."""
    why = q.why
    if FAILED_NOTE in why:
        return "a process failed in its cell, so measuring it stopped (the table says which)", ""
    if DIFFERED_NOTE in why:
        return "a process's outputs differ from the reference's, so measuring it stopped", ""
    if OTHERWISE_NOTE in why:
        return (
            "a process ran otherwise than asked, so measuring it stopped (the table says which)",
            "",
        )
    if why.startswith("budget"):
        return f"the budget ({_duration(decided.budget_seconds)}) ended first", None
    if why.startswith("--repeat"):
        return f"the round limit (--repeat {decided.max_rounds}) came first", None
    if "error budget is spent" in why:
        return "its share of the error budget was spent: every look it was allowed was made", None
    if not why:
        return "measuring stopped before it was decided (interrupted)", rerun(command, [])
    return why.partition(";")[0], ""


def _more_processes(
    reason: str, held: Sequence[Decision], decided: DecidedRun, command: str
) -> tuple[str, str, int | None]:
    """`reason` with about how many processes a side would likely decide the furthest of
    `held` that a run could (MOST_SUGGESTED a side or fewer), the run's command with the
    budget and rounds that takes, and how many of `held` it would likely decide; those
    beyond are said apart."""
    needs = _processes_needed(held, decided)
    within = [needed for needed in needs if needed <= MOST_SUGGESTED]
    beyond = len(needs) - len(within)
    if not within:
        needed = max(needs) if needs else None
        said = would_decide(needed, it="them" if len(held) > 1 else "it")
        return f"{reason}; {said}", "", None
    if len(held) == 1:
        it = "it"
    else:
        it = "them" if len(within) == len(held) else f"{len(within)} of them"
    said = "; " + would_decide(max(within), it=it)
    if beyond:
        said += f"; {beyond} of them would need more than {MOST_SUGGESTED} processes a side to "
        said += "decide " + too_many("them")
    return reason + said, _longer(command, decided, max(within)), len(within)


def _processes_needed(held: Sequence[Decision], decided: DecidedRun) -> list[int]:
    """About how many processes a side would likely decide each of `held` that more processes
    could, if their speedups stay where they are (needed.repetitions_needed)."""
    needs = []
    for q in held:
        if q.repetitions < 2 or q.speedup is None or q.ci_low is None or q.ci_high is None:
            continue
        estimate = RatioEstimate(q.speedup, q.ci_low, q.ci_high, math.nan)
        margin = q.margin or decided.margin or DEFAULT_MARGIN
        needed = repetitions_needed(estimate, q.repetitions, decided.floor, margin, q.level)
        if needed is not None:
            needs.append(needed)
    return needs


def _longer(command: str, decided: DecidedRun, needed: int) -> str:
    """The run's command with the budget and rounds `needed` processes a side would likely
    take: the run's own rounds again, then one round (as long as its last) per process more."""
    rounds, seconds = decided.rounds, decided.round_seconds
    last = seconds[-1] if seconds else decided.seconds / max(rounds, 1)
    more = max(needed - rounds, 1)
    budget = max(decided.seconds + more * last * 1.1, 60.0)
    add = ["--budget", _duration(budget)]
    if rounds + more > decided.max_rounds:
        add += ["--repeat", str(rounds + more)]
    return rerun(command, add)


def _duration(seconds: float) -> str:
    """A --budget: whole minutes, or hours from two on."""
    minutes = math.ceil(seconds / 60)
    return f"{math.ceil(minutes / 60)}h" if minutes >= 120 else f"{max(minutes, 1)}m"
