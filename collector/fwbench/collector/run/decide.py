"""`collector run --until-decided`: rounds of fresh processes until every comparison asked for
is decided, or the budget ends.

The comparisons: every agent against the baseline (`--baseline`, default the first agent) in
every cell both run; an A/A twin (`--aa NAME`: NAME#2) against its own agent NAME instead, so
that the pair measures the noise and should come out equivalent. Each round starts a fresh
process of every agent and measures the cells an open comparison needs, agents one after the
other, in an order that turns from round to round as repetitions do (schedule.py); after each
round from the second, every open comparison is looked at with the sequential rules of
stats/sequential.py (error rates held over repeated looks), and a cell whose comparisons are
all decided is not measured again. Before a round, the time it will likely take (the last
round's, scaled by the cells left) must fit in what remains of the budget; otherwise the run
stops and the open comparisons stay undecided. A comparison stops, undecided, at the first
process of either side that fails in its cell or runs otherwise than asked (stats/failures.py):
the processes that finished cannot stand for one that did not, a verdict from what was not
asked would answer another question, and either, repeated, would only spend the budget. A
process that was interfered (other processes took its CPUs while it was timed,
run/interference.py) is left out instead: its cell is measured again in the next round, as
though that process had not run."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np

from fwbench.collector.run.context import RunContext
from fwbench.collector.run.execute import run_all
from fwbench.collector.run.observations import Observations
from fwbench.collector.run.questions import DecideSettings, Decisions, Question
from fwbench.collector.run.work import AgentWork
from fwbench.collector.stats.margins import SpreadOf, margin_for
from fwbench.collector.stats.needed import repetitions_needed, would_decide
from fwbench.collector.stats.sequential import alpha_between, look, spent_fraction
from fwbench.collector.stats.significance import (
    EQUIVALENT,
    FASTER,
    SLOWER,
    UNDECIDED,
    ProcessSpread,
    RatioEstimate,
)
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.verdicts.arithmetic import difference
from fwbench.collector.verdicts.families import FAMILY, describe_triples, family_baselines
from fwbench.collector.verdicts.kernel_time import compared, kernel_lead

__all__ = ["DecideSettings", "Decisions", "Question", "run_until_decided"]


def questions_for(work: Sequence[AgentWork], baseline: str) -> list[Question]:
    """Every agent's cell (in each mode it runs) against the baseline's (with `--baseline
    family`, its family's native agent's: verdicts/families.py) cell of the same key, an A/A
    twin's against its own agent's; the baseline's twins against the baseline."""
    first_modes: dict[tuple[str, CellKey], str] = {}
    for item in work:
        for cell in item.cells:
            if not cell.unsupported_reason:
                first_modes.setdefault((item.handle.name, cell.key), cell.mode)
    found = []
    natives = family_baselines(describe_triples({w.handle.name: w.describe for w in work}))
    groups = {w.handle.name: w.handle.instance.first_copy for w in work}  # A/A groups
    for item in work:
        name, first = item.handle.name, str(item.handle.instance.first_copy)
        base = natives.get(name) if baseline == FAMILY else baseline
        if (against := first if first != name else base) is None:
            continue  # family view: a native agent, or one whose family has none here
        for cell in item.cells:
            key = cell.key
            mode = first_modes.get((against, key))
            if mode is None or cell.unsupported_reason or (name, cell.mode) == (against, mode):
                continue
            twins = groups[name] == groups.get(against)
            found.append(Question(key, name, cell.mode, against, mode, twins=twins))
    return found


def run_until_decided(
    work: Sequence[AgentWork],
    ctx: RunContext,
    decisions: Decisions,
    new_round: Callable[[int, dict[str, int]], None],
    spread_of: SpreadOf | None = None,
) -> None:
    """Measures rounds until decided, filling `decisions` as it goes (so an interrupt keeps
    what was decided); `new_round(round, cells per agent)` resets the display; `spread_of`:
    this host's earlier spreads, for the margins when --margin is not given (margins.py)."""
    settings = decisions.settings
    planned = {id(item): list(item.cells) for item in work}
    decisions.questions = questions_for(work, settings.baseline)
    seen = Observations(lambda: ctx.round, spread_of)
    ctx.observe = seen.observe
    started = time.monotonic()
    cells_last, first_ended = 0, 0.0
    for round_number in range(settings.max_rounds):
        still = [q for q in decisions.questions if q.open]
        if not still:
            stopped = sum(q.verdict == UNDECIDED for q in decisions.questions)
            decisions.stopped = "every comparison decided" + (
                f" or stopped ({stopped} undecided: a process failed, ran otherwise than asked or "
                "computed other outputs)"
                if stopped
                else ""
            )
            break
        # The cells an open comparison needs: its contender's, and the baseline's.
        needed = {(q.agent, q.mode, q.key) for q in still}
        needed |= {(q.against, q.against_mode, q.key) for q in still}
        for item in work:
            item.cells = [
                c
                for c in planned[id(item)]
                if round_number == 0 or (item.handle.name, c.mode, c.key) in needed
            ]
        cells = sum(len(item.cells) for item in work)
        if round_number and decisions.round_seconds:
            likely = decisions.round_seconds[-1] * cells / max(cells_last, 1)
            left = settings.budget_seconds - (time.monotonic() - started)
            if likely > left:
                decisions.stopped = _budget_said(likely, left, settings.budget_seconds)
                break
        new_round(round_number, {item.handle.name: len(item.cells) for item in work})
        round_started = time.monotonic()
        ctx.round = round_number
        run_all(work, ctx)  # all of them: the agents' order turns with the round (schedule.py)
        decisions.round_seconds.append(time.monotonic() - round_started)
        decisions.rounds, cells_last = round_number + 1, cells
        if round_number == 0:  # the looks' time: what the budget leaves after the first round
            first_ended = time.monotonic()
        looks_time = settings.budget_seconds - (first_ended - started)
        elapsed = time.monotonic() - first_ended
        _stop_failed(decisions, seen.lost)
        _look(decisions, seen.groups, elapsed, max(looks_time, 1e-9), seen.spreads, seen.spoiled)
    else:
        decisions.stopped = f"--repeat {settings.max_rounds}: the most rounds allowed"
    decisions.seconds = time.monotonic() - started
    for question in decisions.questions:
        sides = [(question.agent, question.mode), (question.against, question.against_mode)]
        shares = [seen.kernel.get((a, m, question.key), []) for a, m in sides]
        left_out = [why for a, m in sides for why in seen.spoiled.get((a, m, question.key), [])]
        question.interference_unknown = sum(
            seen.unknown.get((a, m, question.key), 0) for a, m in sides
        )
        if left_out:
            question.interfered, question.interference = len(left_out), left_out[-1]
        if question.open:
            question.why = decisions.stopped + _what_would_decide(question, settings)
            question.why += kernel_lead({question.agent: shares[0], question.against: shares[1]})
            if left_out:
                question.why += (
                    f"; {len(left_out)} interfered processes were left out and measured again "
                    f"(last: {left_out[-1]})"
                )
        elif question.verdict != UNDECIDED:  # decided: where its sides' CPU went, as compare
            question.kernel = compared(question.agent, shares[0], question.against, shares[1])
        ours = seen.ran.get((question.agent, question.mode, question.key), {})
        theirs = seen.ran.get((question.against, question.against_mode, question.key), {})
        question.arithmetic = difference(question.agent, ours, question.against, theirs)


def _budget_said(likely: float, left: float, budget: float) -> str:
    """Why the budget stopped the rounds: what it left was too little for the next round's
    likely time, or nothing (the last round ran past it)."""
    if left <= 0:
        return f"budget: all {budget:.0f} s spent"
    return f"budget: the next round would likely take {likely:.0f} s, {left:.0f} s left"


def _stop_failed(
    decisions: Decisions, lost: dict[tuple[str, str, CellKey], list[tuple[str, str]]]
) -> None:
    """Stops, undecided, every open comparison one of whose sides had a process fail in its
    cell or run otherwise than asked, saying which and why, so that its cells are not
    measured again for it."""
    for question in decisions.questions:
        if not question.open:
            continue
        sides = [(question.agent, question.mode), (question.against, question.against_mode)]
        found = [
            said for agent, mode in sides for said in lost.get((agent, mode, question.key), [])
        ]
        if found:
            notes = dict.fromkeys(why for _, why in found)
            question.why = "; ".join(said for said, _ in found) + ": " + "; ".join(notes)


def _what_would_decide(question: Question, settings: DecideSettings) -> str:
    """For a comparison left open: about how many processes a side would likely decide it, if
    the speedup stays where it is (the interval narrowing as one over their square root)."""
    if question.repetitions < 2 or math.isnan(question.ci_low):
        return ""
    estimate = RatioEstimate(question.speedup, question.ci_low, question.ci_high, math.nan)
    needed = repetitions_needed(
        estimate, question.repetitions, settings.floor, question.margin, question.level
    )
    spread = (
        ""
        if math.isnan(question.spread)
        else f"; one agent's processes differed by {question.spread:.1%} here (SD of their "
        "log medians)"
    )
    return "; " + would_decide(needed) + spread


def _look(
    decisions: Decisions,
    groups: dict[tuple[str, str, CellKey], list[np.ndarray]],
    elapsed: float = 0.0,
    looks_time: float = 0.0,
    spreads: dict[tuple[str, str, CellKey], ProcessSpread | None] | None = None,
    spoiled: dict[tuple[str, str, CellKey], list[str]] | None = None,
) -> None:
    """Looks at every open comparison; `elapsed` seconds of `looks_time` (what the budget
    left after the first round) are gone: the error budget is spent by looks or by time,
    whichever runs out first (stats/sequential.py). A comparison's first look fixes its
    margin: --margin, or from its sides' earlier `spreads` on this host (stats/margins.py)."""
    settings = decisions.settings
    questions = decisions.questions
    # Each family's budget is shared by the comparisons not yet decided in it (Holm-style).
    differences = len(questions) - sum(q.verdict in (FASTER, SLOWER) for q in questions)
    equivalences = len(questions) - sum(q.verdict == EQUIVALENT for q in questions)
    planned = settings.max_rounds - 1  # a comparison's looks: from its second round
    for question in questions:
        if not question.open:
            continue
        base = groups.get((question.against, question.against_mode, question.key), [])
        other = groups.get((question.agent, question.mode, question.key), [])
        if not base or not other:
            sides = ((question.against, question.against_mode), (question.agent, question.mode))
            got = zip(sides, (base, other), strict=True)
            empty = [(agent, mode, question.key) for (agent, mode), seen in got if not seen]
            if not all(side in (spoiled or {}) for side in empty):  # else: measured again
                question.why = "no ok result on one side"
            continue
        if min(len(base), len(other)) < 2:
            continue
        question.looks += 1
        if math.isnan(question.margin):
            question.margin, question.margin_from = margin_for(
                settings.margin,
                question.agent,
                (spreads or {}).get((question.agent, question.mode, question.key)),
                question.against,
                (spreads or {}).get((question.against, question.against_mode, question.key)),
                twins=question.twins,
            )
        spent = spent_fraction(question.looks, planned, elapsed, looks_time)
        if spent <= question.spent:  # the budget is spent: nothing left to look with
            question.why = "the error budget is spent"
            continue
        seen = look(
            base,
            other,
            alpha_between(question.spent, spent, differences),
            alpha_between(question.spent, spent, equivalences),
            settings.floor,
            question.margin,
        )
        question.spent = spent
        question.verdict, question.repetitions = seen.verdict, seen.repetitions
        question.speedup, question.ci_low, question.ci_high, question.level = (
            seen.speedup,
            seen.ci_low,
            seen.ci_high,
            seen.level,
        )
        question.spread = seen.spread
