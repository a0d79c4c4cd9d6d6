"""--until-decided's equivalence margin without --margin: this host's noise for the cell, from
its earlier runs, within [5%, 10%] (stats/margins.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from fwbench.collector.analysis.decisions import decision_rows, decisions_caption
from fwbench.collector.cli.decide import earlier_spreads
from fwbench.collector.run.decide import DecideSettings, Decisions, Question, _look
from fwbench.collector.stats.margins import margin_for
from fwbench.collector.stats.sequential import MARGIN_GIVEN, MAX_HISTORY_MARGIN
from fwbench.collector.stats.significance import (
    DEFAULT_MARGIN,
    EQUIVALENT,
    UNDECIDED,
    ProcessSpread,
)
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.verdicts.record import DecidedRun

KEY = CellKey("conv2d", "train", 8, "float32", 0, "{}", None)


def test_a_given_margin_is_kept_whatever_the_history() -> None:
    spread = ProcessSpread(0.2, 10, 30, 3)
    assert margin_for(0.07, "a", spread, "b", spread) == (0.07, MARGIN_GIVEN)


def test_without_history_of_both_sides_the_margin_is_the_default() -> None:
    margin, source = margin_for(None, "tf-mkl", ProcessSpread(0.05, 10, 30, 3), "tf-eigen", None)
    assert margin == DEFAULT_MARGIN
    assert "tf-eigen" in source and "tf-mkl" not in source
    assert source.startswith("by default: ")


def test_the_margin_is_how_far_apart_one_process_of_each_side_lies() -> None:
    spread = ProcessSpread(0.055, 40, 80, 6)
    margin, source = margin_for(None, "tf-eigen#2", spread, "tf-eigen", spread, twins=True)
    assert margin == pytest.approx(math.expm1(math.sqrt(2) * 0.055))  # about 8.1%
    assert source.startswith("from this host's earlier runs: ") and "lies 8.1% from" in source
    assert "tf-eigen#2's processes 5.5% apart over 6 runs, 80 processes" in source
    mixed, source = margin_for(
        None, "a", ProcessSpread(0.03, 9, 12, 2), "b", ProcessSpread(0.04, 9, 12, 2)
    )
    assert mixed == pytest.approx(math.expm1(0.05))
    assert "a 3.0% over 2 runs, 12 processes; b 4.0% over 2, 12" in source


def test_the_margin_stays_within_its_bounds() -> None:
    quiet, source = margin_for(
        None, "a", ProcessSpread(0.01, 9, 12, 2), "b", ProcessSpread(0.01, 9, 12, 2)
    )
    assert quiet == DEFAULT_MARGIN and "(SD, at least 5%; " in source
    noisy, source = margin_for(
        None, "a", ProcessSpread(0.3, 9, 12, 2), "b", ProcessSpread(0.3, 9, 12, 2)
    )
    assert noisy == MAX_HISTORY_MARGIN and "(SD, at most 10%; " in source


def test_the_first_look_fixes_the_margin_and_equivalence_is_judged_against_it() -> None:
    """Two sides 1% apart in truth, processes 7% apart: these 8 a side (a seeded draw) neither
    narrow the interval to within the default 5% nor clear the 3% floor, but it fits within
    the 10% margin the history gave."""
    rng = np.random.default_rng(1)

    def side(truth: float) -> list[np.ndarray]:
        return [truth * rng.lognormal(0, 0.07) * np.ones(5) for _ in range(8)]

    base, other = side(1.0), side(1.01)
    wide = ProcessSpread(0.3, 9, 12, 2)
    verdicts = {}
    for name, spreads in (("none", {}), ("history", {("b", "", KEY): wide, ("a", "", KEY): wide})):
        question = Question(KEY, "a", "", "b", "")
        decisions = Decisions(DecideSettings("b", 0.03, None, math.inf, 3), [question])
        _look(decisions, {("b", "", KEY): base, ("a", "", KEY): other}, spreads=spreads)
        verdicts[name] = question.verdict
        assert question.margin == (MAX_HISTORY_MARGIN if spreads else DEFAULT_MARGIN)
        before = question.margin
        question.margin_from += "!"
        _look(decisions, {("b", "", KEY): base, ("a", "", KEY): other}, spreads={})
        assert question.margin == before and question.margin_from.endswith("!")  # kept
    assert verdicts == {"none": UNDECIDED, "history": EQUIVALENT}, verdicts


def test_the_decisions_table_says_each_margin_and_where_it_came_from() -> None:
    spread = ProcessSpread(0.045, 40, 160, 8)
    key, agents = KEY, [("a#2", "a"), ("b", "a"), ("c", "a")]
    questions = [Question(key, agent, "", against, "") for agent, against in agents]
    for question in questions:
        question.margin, question.margin_from = margin_for(
            None, question.agent, spread, question.against, spread, twins=question.agent == "a#2"
        )
    questions[0].verdict, questions[1].why = EQUIVALENT, "budget: ..."
    questions[2].verdict = "slower"
    record = Decisions(DecideSettings("a", 0.03, None, 600, 100), questions).record()
    verdicts = [cells[-1] for cells, _ in decision_rows(DecidedRun.from_record(record))]
    assert verdicts[0] == (
        "equivalent within ±6.6% (from this host's earlier runs: one process of each side lies "
        "6.6% from the other (SD; a#2's processes 4.5% apart over 8 runs, 160 processes))"
    )
    assert verdicts[1].startswith("undecided (budget: ...; margin ±6.6% from this host's earlier")
    assert verdicts[2] == "slower"  # a difference does not depend on the margin
    assert "each comparison's margin" in decisions_caption(DecidedRun.from_record(record))
    given = Decisions(DecideSettings("a", 0.03, 0.07, 600, 100), questions[:1])
    questions[0].margin, questions[0].margin_from = margin_for(0.07, "a#2", None, "a", None)
    assert [cells[-1] for cells, _ in decision_rows(DecidedRun.from_record(given.record()))] == [
        "equivalent within ±7.0%"
    ]
    assert "Equivalent: within ±7%" in decisions_caption(DecidedRun.from_record(given.record()))


def test_an_unreadable_history_leaves_the_default_margins_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "results.sqlite"
    broken.write_bytes(b"not a database" * 100)
    spread_of = earlier_spreads(broken, "r1", {"started_at": "2026-01-01T00:00:00"})
    assert spread_of({"agent": "a"}) is None
    assert "earlier runs could not be read" in capsys.readouterr().err
