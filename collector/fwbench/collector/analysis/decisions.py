"""The decisions a run measured `--until-decided` stored in its metadata (read through
verdicts/record.py's DecidedRun), as rows and lines for the CLI, `compare` and the report.
They are the run's answers: made by the sequential procedure whose error rates hold under
its repeated looks, which a fixed-level test re-run on the same data afterwards does not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fwbench.collector.stats.sequential import MAX_HISTORY_MARGIN
from fwbench.collector.stats.significance import DEFAULT_MARGIN, EQUIVALENT
from fwbench.collector.verdicts.record import DecidedRun, Decision

DECISION_HEADERS = ("cell", "agent", "against", "speedup", "interval", "processes", "verdict")
SEQUENTIAL_NOTE = (
    "This run was measured until decided: its answers are the sequential decisions (alpha "
    "spent over the looks), and they are the verdicts of the comparisons they cover, marked "
    "'sequential'. The speedup and 95% interval of the comparison table pool every round and "
    "only describe: a fixed-level test re-run on them after the looks would not hold its error "
    "rates, so none is shown for those comparisons (no p). A comparison the run did not ask "
    "keeps its fixed-level verdict, marked 'fixed-level'."
)


def stored_decisions(metadata: dict[str, Any]) -> DecidedRun | None:
    """The run's until-decided record, or None for a run measured a fixed number of times."""
    record = metadata.get("until_decided")
    if not isinstance(record, dict) or record.get("decisions") is None:
        return None
    return DecidedRun.from_record(record)


def decisions_caption(decided: DecidedRun) -> str:
    if decided.margin is None:  # each comparison's own (stats/margins.py)
        equivalent = (
            "each comparison's margin, fixed at its first look from this host's earlier runs "
            f"of its cell, within [{DEFAULT_MARGIN:.0%}, {MAX_HISTORY_MARGIN:.0%}] "
            f"({DEFAULT_MARGIN:.0%} without them)"
        )
    else:
        equivalent = f"±{max(decided.margin, decided.floor):.0%}"
    # Runs since the rules had two families store each interval's level; an equivalence's
    # interval is then that of its two one-sided tests (1 - 2a), a difference's two-sided.
    tost = any(d.level is not None for d in decided.decisions)
    which = "; an equivalence's: that of its two one-sided tests" if tost else ""
    return (
        f"{decided.rounds} round{'s' if decided.rounds != 1 else ''} in "
        f"{decided.seconds:.0f} s of a {decided.budget_seconds:.0f} s budget; stopped: "
        f"{decided.stopped}. Equivalent: within {equivalent}; intervals at each comparison's "
        f"last look{which} ({decided.method})." + _spending(decided)
    )


def rounds_line(decided: DecidedRun, notes: Sequence[str] = ()) -> str:
    """How the rounds went, in one line (decisions_caption says how they decide); why they
    stopped by the number of the note that says it, where one of `notes` does."""
    rounds, stopped = decided.rounds, decided.stopped
    if stopped in notes:
        stopped = f"note {list(notes).index(stopped) + 1}"
    return (
        f"{rounds} round{'s' if rounds != 1 else ''} of fresh processes in "
        f"{decided.seconds:.0f} s of a {decided.budget_seconds:.0f} s budget; stopped: {stopped}"
    )


def _spending(decided: DecidedRun) -> str:
    """How much of the error budgets the looks spent (runs before time-aware spending did not
    record it): rounds and time each spend it, whichever runs out first."""
    spent = [d.spent for d in decided.decisions if d.spent]
    if not spent:
        return ""
    planned = max(decided.max_rounds - 1, 1)
    progress = (
        f"its share of {planned} planned looks (--repeat) or of the budget's time after the "
        "first round, whichever is larger"
    )
    if "cube of the progress" in decided.method:  # runs from 2026-11-27 on
        return (
            f" The looks spent up to {max(spent):.0%} of each error budget: by a look, the "
            f"cube of the progress, {progress} (little early, most where processes are many)."
        )
    return f" The looks spent up to {max(spent):.0%} of each error budget: each spends {progress}."


def decision_rows(decided: DecidedRun) -> list[tuple[list[str], str]]:
    """One row of DECISION_HEADERS per comparison, with its bare verdict (for styling)."""
    rows = []
    for d in decided.decisions:
        bounded = d.ci_low is not None and d.ci_high is not None
        interval = f"[{d.ci_low:.3f}, {d.ci_high:.3f}]" if bounded else "-"
        speedup = "-" if d.speedup is None else f"{d.speedup:.3f}x"
        said = decision_note(d)
        verdict = d.verdict
        if verdict == EQUIVALENT and d.margin is not None:
            verdict += f" within ±{max(d.margin, decided.floor):.1%}"
        verdict = f"{verdict} ({said})" if said else verdict
        cells = [
            d.cell,
            d.agent + (f" ({d.mode})" if d.mode else ""),
            d.against + (f" ({d.against_mode})" if d.against_mode else ""),
            speedup,
            interval,
            str(d.repetitions),
            verdict,
        ]
        rows.append((cells, d.verdict))
    return rows


def decision_note(decision: Decision) -> str:
    """What one stored decision says besides its verdict (Decision.reasons, in one line)."""
    return "; ".join(decision.reasons())
