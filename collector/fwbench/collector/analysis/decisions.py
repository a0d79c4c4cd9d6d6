"""The decisions a run measured `--until-decided` stored in its metadata (run/decide.py's
Decisions.record()), as rows for the CLI, `compare` and the report. They are the run's
answers: made by the sequential procedure whose error rates hold under its repeated looks,
which a fixed-level test re-run on the same data afterwards does not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fwbench.collector.stats.sequential import MARGIN_GIVEN, MAX_HISTORY_MARGIN
from fwbench.collector.stats.significance import DEFAULT_MARGIN, EQUIVALENT, FASTER, SLOWER
from fwbench.collector.store.interference_columns import UNKNOWN, UNKNOWN_WHY

DECISION_HEADERS = ("cell", "agent", "against", "speedup", "interval", "processes", "verdict")
SEQUENTIAL_NOTE = (
    "This run was measured until decided: its answers are the sequential decisions (alpha "
    "spent over the looks), and they are the verdicts of the comparisons they cover, marked "
    "'sequential'. The speedup and 95% interval of the comparison table pool every round and "
    "only describe: a fixed-level test re-run on them after the looks would not hold its error "
    "rates, so none is shown for those comparisons (no p). A comparison the run did not ask "
    "keeps its fixed-level verdict, marked 'fixed-level'."
)


def stored_decisions(metadata: dict[str, Any]) -> dict[str, Any] | None:
    """The run's until-decided record, or None for a run measured a fixed number of times."""
    record = metadata.get("until_decided")
    return record if isinstance(record, dict) and record.get("decisions") is not None else None


def decisions_caption(decisions: dict[str, Any]) -> str:
    if decisions["margin"] is None:  # each comparison's own (stats/margins.py)
        equivalent = (
            "each comparison's margin, fixed at its first look from this host's earlier runs "
            f"of its cell, within [{DEFAULT_MARGIN:.0%}, {MAX_HISTORY_MARGIN:.0%}] "
            f"({DEFAULT_MARGIN:.0%} without them)"
        )
    else:
        equivalent = f"±{max(decisions['margin'], decisions['floor']):.0%}"
    # Runs since the rules had two families store each interval's level; an equivalence's
    # interval is then that of its two one-sided tests (1 - 2a), a difference's two-sided.
    tost = any("level" in q for q in decisions["decisions"])
    which = "; an equivalence's: that of its two one-sided tests" if tost else ""
    return (
        f"{decisions['rounds']} round{'s' if decisions['rounds'] != 1 else ''} in "
        f"{decisions['seconds']:.0f} s of a "
        f"{decisions['budget_seconds']:.0f} s budget; stopped: {decisions['stopped']}. "
        f"Equivalent: within {equivalent}; intervals at each comparison's last look{which} "
        f"({decisions['method']})." + _spending(decisions)
    )


def rounds_line(decisions: dict[str, Any], notes: Sequence[str] = ()) -> str:
    """How the rounds went, in one line (decisions_caption says how they decide); why they
    stopped by the number of the note that says it, where one of `notes` does."""
    rounds, stopped = decisions["rounds"], decisions["stopped"]
    if stopped in notes:
        stopped = f"note {list(notes).index(stopped) + 1}"
    return (
        f"{rounds} round{'s' if rounds != 1 else ''} of fresh processes in "
        f"{decisions['seconds']:.0f} s of a {decisions['budget_seconds']:.0f} s budget; "
        f"stopped: {stopped}"
    )


def _spending(decisions: dict[str, Any]) -> str:
    """How much of the error budgets the looks spent (runs before time-aware spending did not
    record it): rounds and time each spend it, whichever runs out first."""
    spent = [q["spent"] for q in decisions["decisions"] if q.get("spent")]
    if not spent:
        return ""
    planned = max(decisions.get("max_rounds", 0) - 1, 1)
    progress = (
        f"its share of {planned} planned looks (--repeat) or of the budget's time after the "
        "first round, whichever is larger"
    )
    if "cube of the progress" in str(decisions.get("method", "")):  # runs from 2026-11-27 on
        return (
            f" The looks spent up to {max(spent):.0%} of each error budget: by a look, the "
            f"cube of the progress, {progress} (little early, most where processes are many)."
        )
    return f" The looks spent up to {max(spent):.0%} of each error budget: each spends {progress}."


def decision_rows(decisions: dict[str, Any]) -> list[tuple[list[str], str]]:
    """One row of DECISION_HEADERS per comparison, with its bare verdict (for styling)."""
    rows = []
    for q in decisions["decisions"]:
        interval = "-" if q["ci_low"] is None else f"[{q['ci_low']:.3f}, {q['ci_high']:.3f}]"
        speedup = "-" if q["speedup"] is None else f"{q['speedup']:.3f}x"
        said = decision_note(q)
        verdict = q["verdict"]
        if verdict == EQUIVALENT and q.get("margin") is not None:
            verdict += f" within ±{max(q['margin'], decisions['floor']):.1%}"
        verdict = f"{verdict} ({said})" if said else verdict
        cells = [
            q["cell"],
            q["agent"] + (f" ({q['mode']})" if q["mode"] else ""),
            q["against"] + (f" ({q['against_mode']})" if q["against_mode"] else ""),
            speedup,
            interval,
            str(q["repetitions"]),
            verdict,
        ]
        rows.append((cells, q["verdict"]))
    return rows


def decision_note(q: dict[str, Any]) -> str:
    """What one stored decision says besides its verdict: why it stayed undecided, where an
    undecided one's margin came from, a difference in arithmetic, where its CPU went."""
    return "; ".join(decision_reasons(q))


def decision_reasons(q: dict[str, Any]) -> list[str]:
    """decision_note's parts, each on its own (a table footnotes them: glance.py)."""
    # Older runs: no arithmetic, kernel or margin; one margin for all (the caption's).
    margin, source = q.get("margin"), q.get("margin_from") or MARGIN_GIVEN
    if source == MARGIN_GIVEN or q["verdict"] in (FASTER, SLOWER):
        source = ""  # the caption's, or a difference (which does not depend on it)
    elif q["verdict"] != EQUIVALENT:  # an equivalence's verdict says its margin
        source = f"margin ±{margin:.1%} {source}"
    why = [part for part in str(q.get("why") or "").split("; ") if part]
    unknown = q.get("interference_unknown") or 0  # runs from 2026-12-06 on
    if unknown:
        why.append(f"{UNKNOWN} for {unknown} of the processes it rests on: {UNKNOWN_WHY}")
    return [w for w in (*why, source, q.get("arithmetic"), q.get("kernel")) if w]
