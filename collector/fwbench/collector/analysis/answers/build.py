"""The answers of a comparison set: with_decisions makes a run's sequential decisions the
verdicts of the comparisons they cover; answers says what was decided, then what was not,
grouped (reasons.py); run_answers does both for a stored run, as the end of `collector run`
shows it."""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from fwbench.collector.analysis.answers.found import (
    FIXED_LEVEL,
    SEQUENTIAL,
    Answers,
    Found,
    answers_title,
)
from fwbench.collector.analysis.answers.gaps import GapNamer, gap_namer
from fwbench.collector.analysis.answers.reasons import Groups, comparison_reason, decision_reason
from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.comparison import Comparison, ComparisonSet
from fwbench.collector.analysis.contenders import ComparisonError, RunData, contenders, load_run
from fwbench.collector.analysis.decisions import decision_note, stored_decisions
from fwbench.collector.analysis.efficiency import percent_interval
from fwbench.collector.analysis.history import host_history, margin_histories
from fwbench.collector.stats.significance import FASTER, SLOWER, UNDECIDED
from fwbench.collector.store import PersistenceError, ResultStore
from fwbench.collector.store.cell_key import CellKey, varying_params
from fwbench.collector.store.interference_columns import UNKNOWN
from fwbench.collector.verdicts.record import DecidedRun, Decision

_Namer = Callable[[CellKey], str]
FIXED_LEVEL_NOTE = "fixed-level test of the pooled rounds: not a question the run asked"


def with_decisions(result: ComparisonSet, decided: DecidedRun | None) -> ComparisonSet:
    """`result` (one run, pooled, fixed-level) with the run's sequential decisions as the
    verdicts of the comparisons they cover (either way round: tf-mkl against tf-eigen is
    tf-eigen against tf-mkl inverted): the decision's verdict, no Holm-adjusted p (the
    fixed-level test calls nothing there), and the decision's figures and notes in the notes.
    The others are labelled FIXED_LEVEL. Unchanged for a run measured a fixed number of
    times."""
    if decided is None:
        return result
    done = []
    for comparison in result.comparisons:
        found = decision_for(comparison, decided.decisions)
        if found is None:
            reasons = (*comparison.reasons, FIXED_LEVEL_NOTE)
            done.append(replace(comparison, verdict_from=FIXED_LEVEL, reasons=reasons))
            continue
        q, inverted = found
        verdict, speedup, low, high = q.oriented(inverted)
        notes = f"{SEQUENTIAL}: {_ratio(speedup, low, high, 3)}, {q.repetitions} processes "
        notes += "a side" + (f"; {said}" if (said := decision_note(q)) else "")
        done.append(
            replace(
                comparison,
                verdict=verdict,
                p_adjusted=math.nan,
                p_equivalent_adjusted=math.nan,
                notes=notes,
                reasons=tuple(q.reasons()),
                verdict_from=SEQUENTIAL,
            )
        )
    return replace(result, comparisons=done)


def answers(
    result: ComparisonSet,
    title: str,
    decided: DecidedRun | None = None,
    command: str = "",
    runs: tuple[str, str] | None = None,
    run: RunData | None = None,
) -> Answers:
    """What `result` found (after with_decisions, for a run measured until decided: then
    every decision is an answer, the comparisons it does not cover follow, labelled).
    `command`: the run's own (run.json), from which the commands that would decide the
    undecided are made; `runs`: (before, after) when `result` compares two runs; `run`: the
    one run `result` compares within, whose profiles say where each decided gap lives."""
    questions = list(decided.decisions) if decided is not None else []
    cell = cell_namer([c.key for c in result.comparisons] + [q.cell_key for q in questions])
    modes: dict[str, set[str]] = {}
    for comparison in result.comparisons:
        modes.setdefault(comparison.agent, set()).add(comparison.mode)
    # The comparisons a decision answered are said by it.
    # A run measured until decided answers with its decisions alone: the comparisons it did
    # not ask (an A/A twin against the baseline) stay in the tables, labelled fixed-level.
    rest = [] if decided is not None else list(result.comparisons)
    gap = gap_namer(run, result.comparisons)
    found = [
        _with_gap(_decided_line(q, decided, cell), gap, _covered(q, result.comparisons))
        for q in questions
        if q.decided and decided
    ]
    found += [
        _with_gap(_comparison_line(c, cell, runs, len(modes[c.agent]) > 1), gap, c)
        for c in rest
        if c.verdict != UNDECIDED
    ]
    groups = Groups()
    for q in questions:
        if not q.decided and decided is not None:
            groups.add(*decision_reason(q, decided, command), q)
    for comparison in rest:
        if comparison.verdict == UNDECIDED:
            groups.add(*comparison_reason(comparison, command, runs), comparison)
    return Answers(title, found, groups.said(decided, command))


def _with_gap(found: Found, gap: GapNamer, comparison: Comparison | None) -> Found:
    said = gap(comparison) if comparison is not None else ""
    return replace(found, text=f"{found.text}; {said}", gap=said) if said else found


def _covered(q: Decision, comparisons: Sequence[Comparison]) -> Comparison | None:
    """The comparison a decision answers, if the run has it."""
    return next((c for c in comparisons if decision_for(c, [q]) is not None), None)


def _decided_line(q: Decision, decided: DecidedRun, cell: _Namer) -> Found:
    """A stored decision's one line."""
    agent = q.agent + (f" ({q.mode})" if q.mode else "")
    against = q.against + (f" ({q.against_mode})" if q.against_mode else "")
    where = cell(q.cell_key)
    text = _sentence(agent, against, q.verdict, where, decided.margin_of(q))
    text += ": " + _ratio(q.speedup, q.ci_low, q.ci_high)
    text += f" ({UNKNOWN})" if q.interference_unknown else ""
    return Found(q.verdict, text, agent, against, where, q.speedup, q.ci_low, q.ci_high, SEQUENTIAL)


def _comparison_line(
    comparison: Comparison, cell: _Namer, runs: tuple[str, str] | None, modes: bool
) -> Found:
    """A decided fixed-level comparison's one line; `modes`: its agent ran in several (an
    agent's modes against each other name both)."""
    c = comparison
    own = c.agent == c.baseline and c.mode != c.baseline_mode and not c.is_scaling
    agent = c.agent + (f" ({c.mode})" if modes or own else "")
    against = c.baseline + (f" ({c.baseline_mode})" if own else "")
    where = cell(comparison.key)
    within = max(comparison.margin, comparison.noise_floor)
    if comparison.is_scaling:  # one agent's worlds: efficiency, per replica
        text = f"{agent} scales {comparison.shown_verdict}ly from {comparison.baseline} in {where}"
        text += ": efficiency " + percent_interval(
            comparison.speedup, comparison.ci_low, comparison.ci_high
        )
    else:
        text = _sentence(agent, against, comparison.verdict, where, within, runs)
        text += ": " + _ratio(comparison.speedup, comparison.ci_low, comparison.ci_high)
    if any(reason.startswith(UNKNOWN) for reason in comparison.reasons):
        text += f" ({UNKNOWN})"
    if comparison.verdict_from == FIXED_LEVEL:
        text += f" ({FIXED_LEVEL_NOTE})"
    return Found(
        comparison.verdict,
        text,
        agent,
        against,
        where,
        comparison.speedup,
        comparison.ci_low,
        comparison.ci_high,
        comparison.verdict_from,
    )


def run_answers(
    store: ResultStore, run_id: str, baseline: str | None = None, use_history: bool = True
) -> Answers | None:
    """What a stored run found (run_comparisons' answers)."""
    found = run_comparisons(store, run_id, baseline, use_history)
    return None if found is None else found[1]


def run_comparisons(
    store: ResultStore, run_id: str, baseline: str | None = None, use_history: bool = True
) -> tuple[ComparisonSet, Answers, DecidedRun | None] | None:
    """What a run found, as `collector compare RUN --baseline BASELINE` with its defaults
    would say it (the host's history and margins included): for the end of `collector run`.
    `baseline`: the run's --baseline, else the first agent that measured. None when there is
    nothing to compare (one agent, nothing measured). Returns the comparisons (after
    with_decisions), the answers and the run's until-decided record."""
    try:
        run = load_run(store, run_id)
    except ComparisonError:
        return None
    decided = stored_decisions(run.metadata)
    cells = contenders(run)
    if not cells:
        return None
    earliest = min(cells, key=lambda c: c.first_cell).agent
    baseline = baseline or (decided.baseline if decided is not None else "") or earliest
    try:
        history = host_history(store, run) if use_history else None
        margins = margin_histories(store, [run])[0] if use_history else None
    except (PersistenceError, sqlite3.Error, ValueError, KeyError, TypeError):
        history = margins = None  # an unreadable history: the comparisons without it
    try:
        result = compare_to_baseline(run, baseline, history=history, margins=margins)
    except ComparisonError:
        return None
    if not result.comparisons and decided is None:
        return None
    result = with_decisions(result, decided)
    command = str(run.metadata.get("command") or "")
    found = answers(result, answers_title(run_id, baseline, decided), decided, command, run=run)
    return result, found, decided


def decision_for(
    comparison: Comparison, decisions: Sequence[Decision]
) -> tuple[Decision, bool] | None:
    """The stored decision of the same question as `comparison`, and whether it is the other
    way round. A decision's mode is the one asked ("" for the agent's default), a
    comparison's the one that ran, so "" matches any."""
    key = _key(comparison.key)
    sides = ((comparison.agent, comparison.mode), (comparison.baseline, comparison.baseline_mode))
    for q in decisions:
        if _key(q.key) != key:
            continue
        ours = ((q.agent, q.mode), (q.against, q.against_mode))
        for inverted, (mine, theirs) in enumerate((ours, ours[::-1])):
            if all(
                name == side[0] and mode in ("", side[1])
                for (name, mode), side in zip((mine, theirs), sides, strict=True)
            ):
                return q, bool(inverted)
    return None


def _key(key: Sequence[Any]) -> tuple[Any, ...]:
    """A cell key as both a stored decision (run/questions.py) and a row (contenders.py) give
    it: missing thread counts and strategies as 0 and "", shape parameters as sorted JSON."""
    workload, phase, batch, dtype, threads, params, strategy = key
    shape = json.dumps(json.loads(params or "{}"), sort_keys=True)
    return workload, phase, int(batch), dtype, int(threads or 0), shape, strategy or ""


def _ratio(speedup: float | None, low: float | None, high: float | None, places: int = 2) -> str:
    def one(value: float | None) -> str:
        if value is None or math.isnan(value):
            return "-"
        return f"{value:.{places}f}" if value >= 10 ** (1 - places) else f"{value:.2g}"

    return f"{one(speedup)}x [{one(low)}, {one(high)}]"


def _sentence(
    agent: str,
    against: str,
    verdict: str,
    cell: str,
    within: float | None,
    runs: tuple[str, str] | None = None,
) -> str:
    margin = f" within ±{within:.1%}" if within is not None else ""
    if runs is not None:  # `against` is the earlier run
        how = {FASTER: "faster in", SLOWER: "slower in"}.get(verdict)
        said = f"{how} run {runs[1]} than in" if how else f"the same{margin} in run {runs[1]} as in"
        return f"{agent} is {said} run {runs[0]} in {cell}"
    relation = {FASTER: "faster than", SLOWER: "slower than"}.get(verdict, f"equivalent{margin} to")
    return f"{agent} is {relation} {against} in {cell}"


def cell_namer(keys: Sequence[CellKey]) -> _Namer:
    """Names cells as tables do, without the dtype where every cell has the same one."""
    shown = varying_params(keys)
    one_dtype = len({key.dtype for key in keys}) <= 1

    def name(key: CellKey) -> str:
        label = key.label(shown)
        return (
            label.replace(f" bs={key.batch_size} {key.dtype}", f" bs={key.batch_size}", 1)
            if one_dtype
            else label
        )

    return name
