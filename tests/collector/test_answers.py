"""One answer per question, and the answers first (analysis/answers.py): a run measured until
decided shows its sequential decision as the verdict of each comparison it covers, in
`collector compare` (table, Markdown, JSON, CSV), the end-of-run summary and the report, even
where the pooled fixed-level test would have said something else; and every one of them opens
with what the run found: decided lines first, then each reason for what stayed undecided
once, with the command that would decide it, never once a row."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console
from typer.testing import CliRunner

from fwbench.collector.analysis import formats
from fwbench.collector.analysis.answers import (
    FIXED_LEVEL,
    SEQUENTIAL,
    answers,
    footnoted,
    rerun,
    rich_answers,
    run_answers,
    with_decisions,
)
from fwbench.collector.analysis.answers.reasons import Groups, decision_reason
from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.comparison import ONE_PROCESS_NOTE
from fwbench.collector.analysis.contenders import RunData, load_run
from fwbench.collector.analysis.decisions import stored_decisions
from fwbench.collector.analysis.report import write_report
from fwbench.collector.cli import app
from fwbench.collector.stats.significance import SLOWER, UNDECIDED
from fwbench.collector.store import ResultStore
from fwbench.collector.verdicts.record import DecidedRun, Decision

CONV = ("conv2d", "train", 8)
GEMM = ("gemm", "train", 8)
PARAMS = json.dumps({"m": 8})  # conftest.synthetic_row's
DECIDED_LINE = "slow is slower than fast in conv2d train bs=8: 0.89x [0.82, 0.97]"
COMMAND = "collector run --agents fast,slow --aa slow --until-decided --budget 6m --out /tmp/x"


def processes(medians: list[float], seed: int, n: int = 40) -> list[np.ndarray]:
    """One sample array per process, each process steady around its own median."""
    rng = np.random.default_rng(seed)
    return [m * rng.lognormal(0.0, 0.01, n) for m in medians]


def _decision(agent: str, against: str, verdict: str, **values: Any) -> dict[str, Any]:
    return {
        "key": ["conv2d", "train", 8, "float32", 0, PARAMS, ""],
        "cell": "conv2d train bs=8 float32",
        "agent": agent,
        "mode": "",
        "against": against,
        "against_mode": "",
        "verdict": verdict,
        "level": 0.9995,
        "looks": 15,
        "spent": 0.9,
        "spread": 0.05,
        "margin": 0.05,
        "margin_from": "by default: this host has no earlier runs of both",
        "why": "",
        "arithmetic": "",
        "kernel": "",
        **values,
    }


def _finish(store: ResultStore, run_id: str, **metadata: Any) -> RunData:
    store.finish_run(run_id, "ok", "2026-01-01T00:06:00+00:00", {"run_id": run_id, **metadata})
    return load_run(store, run_id)


@pytest.fixture
def decided(make_run: Callable[..., RunData], store: ResultStore) -> RunData:
    """Processes of one agent 20% apart: pooled over three a side, `slow` against `fast` is
    undecided by the fixed-level test; the run's sequential decision (16 processes a side,
    stored as run/decide.py stores it) called it slower. The A/A pair stayed undecided when
    the budget ended."""
    make_run(
        "decided",
        {
            "fast": {CONV: processes([0.0100, 0.0125, 0.0085], 1)},
            "slow": {CONV: processes([0.0112, 0.0135, 0.0095], 2)},
            "slow#2": {CONV: processes([0.0110, 0.0140, 0.0093], 3)},
        },
    )
    stopped = "budget: the next round would likely take 21 s, 12 s left"
    record = {
        "baseline": "fast",
        "floor": 0.03,
        "margin": None,
        "budget_seconds": 360.0,
        "max_rounds": 100,
        "rounds": 16,
        "seconds": 349.0,
        "round_seconds": [30.0] * 6 + [20.0] * 10,
        "stopped": stopped,
        "method": "Yuen's t; cube of the progress",
        "decisions": [
            _decision(
                "slow", "fast", SLOWER, speedup=0.894, ci_low=0.825, ci_high=0.968, repetitions=5
            ),
            _decision(
                "slow#2",
                "slow",
                UNDECIDED,
                speedup=1.02,
                ci_low=0.96,
                ci_high=1.08,
                repetitions=16,
                why=f"{stopped}; about 56 processes a side would likely "
                "decide it; one agent's processes differed by 4.4% here",
            ),
        ],
    }
    return _finish(store, "decided", command=COMMAND, until_decided=record)


def _slow_rows(text: str) -> list[str]:
    """The rows of a table (Markdown, or a terminal's with its cells wrapped over several
    lines) that hold slow's comparison, not its A/A twin's: each row as one string."""
    rows: list[list[str]] = [[]]
    for line in text.splitlines():
        cells = re.split(r"[|│]", line)
        if len(cells) < 4 or not line.lstrip().startswith(("|", "│")):
            rows.append([])  # a table's border, or text: no row goes on past it
        elif cells[2].strip() or not rows[-1]:  # a row starts where its agent is named
            rows.append([line])
        else:
            rows[-1].append(line)
    return [" ".join(r) for r in rows if r and re.split(r"[|│]", r[0])[2].strip() == "slow"]


def test_the_pooled_test_alone_would_leave_it_undecided(decided: RunData) -> None:
    pooled = {c.agent: c for c in compare_to_baseline(decided, "fast").comparisons}
    assert pooled["slow"].verdict == UNDECIDED and pooled["slow"].evidence == "processes"


def test_the_decision_is_the_verdict_of_the_comparison_it_covers(decided: RunData) -> None:
    record = stored_decisions(decided.metadata)
    result = with_decisions(compare_to_baseline(decided, "fast"), record)
    by_agent = {c.agent: c for c in result.comparisons}
    slow = by_agent["slow"]
    assert (slow.verdict, slow.verdict_from) == (SLOWER, SEQUENTIAL)
    assert np.isnan(slow.p_adjusted)  # the fixed-level test calls nothing here
    assert slow.notes.startswith("sequential: 0.894x [0.825, 0.968], 5 processes a side")
    # Not a question the run asked (the twin was compared with its own agent): its own
    # verdict, labelled.
    assert by_agent["slow#2"].verdict_from == FIXED_LEVEL
    # Asked the other way round, the same decision, inverted.
    inverted = with_decisions(compare_to_baseline(decided, "slow"), record)
    fast = next(c for c in inverted.comparisons if c.agent == "fast")
    assert (fast.verdict, fast.verdict_from) == ("faster", SEQUENTIAL)
    assert fast.notes.startswith("sequential: 1.119x [1.033, 1.212]")


def test_a_rerun_of_days_is_not_suggested(decided: RunData) -> None:
    # The A/A twin as it stood after 5 rounds: 1.036x [0.85, 1.26], past the floor by 0.6%
    # and inside the 5% margin by 1.3%. Hundreds of processes a side would likely decide it:
    # said so, with no command (its --budget would be hours of rounds for one comparison).
    record = {**decided.metadata["until_decided"], "rounds": 5, "max_rounds": 5}
    record["round_seconds"] = [30.0] * 5
    twin = record["decisions"][1] = {
        **record["decisions"][1],
        "speedup": 1.036,
        "ci_low": 0.85,
        "ci_high": 1.26,
        "repetitions": 5,
        "why": "--repeat 5: the most rounds allowed",
    }
    run, groups = DecidedRun.from_record(record), Groups()
    stored = Decision.from_record(twin)
    groups.add(*decision_reason(stored, run, COMMAND), stored)
    [group] = groups.said(run, COMMAND)
    assert group.reason.startswith("the round limit (--repeat 5) came first; more than 100 ")
    assert group.command == "", group
    # Beside one a run could decide (0.93x [0.80, 1.08], 5 a side): the command is for that one,
    # and the other is said apart.
    near = {**twin, "agent": "slow", "speedup": 0.93, "ci_low": 0.80, "ci_high": 1.08}
    stored = Decision.from_record(near)
    groups.add(*decision_reason(stored, run, COMMAND), stored)
    [group] = groups.said(run, COMMAND)
    assert re.search(
        r"; about \d+ processes a side would likely decide 1 of them; 1 of them "
        r"would need more than 100 processes a side to decide them: too many to run",
        group.reason,
    ), group.reason
    assert "--repeat" in group.command and "--budget" in group.command, group
    assert group.then.startswith("to decide 1 of them: collector run "), group.then


def invoke(*args: str) -> str:
    done = CliRunner().invoke(app, list(args), env={"COLUMNS": "250"})
    assert done.exit_code == 0, done.output
    return done.output


def test_compare_shows_slower_everywhere_and_undecided_nowhere(
    decided: RunData, store: ResultStore
) -> None:
    common = ("compare", "decided", "--baseline", "fast", "--store", str(store.path))
    table = invoke(*common)
    assert table.index(DECIDED_LINE) < table.index("speedup over fast")  # answers first
    # One line a comparison: slow's (not its twin's) is slower, with the decision's figures.
    rows = [x for x in table.splitlines() if re.search(r"\bslow\s+\d", x) and "slow#2" not in x]
    assert rows and all(re.search(r"\d\]\s+slower\b", row) for row in rows), table
    assert "sequential decisions" not in table
    verbose = invoke(*common, "--verbose")  # every figure, and the decisions' own table
    rows = _slow_rows(verbose)
    assert rows and all("undecided" not in row for row in rows), rows
    assert all("slower" in row for row in rows), rows  # the comparison's and the decision's
    assert re.search(r"slower\s.*\(sequential\)", rows[0]), rows
    assert "sequential decisions" in verbose  # the note that says what the table's figures are
    markdown = invoke(*common, "--format", "markdown")
    assert markdown.startswith("## What run decided found (measured until decided")
    assert f"- **slower**: {DECIDED_LINE}" in markdown
    rows = _slow_rows(markdown)
    assert rows and all("undecided" not in row for row in rows), rows
    document = json.loads(invoke(*common, "--format", "json"))
    slow = next(c for c in document["comparisons"] if c["agent"] == "slow")
    assert (slow["verdict"], slow["verdict_from"], slow["p_holm"]) == (SLOWER, SEQUENTIAL, None)
    assert document["answers"]["decided"][0]["text"] == DECIDED_LINE
    assert not any("slow " in g["text"] for g in document["answers"]["undecided"])
    rows = list(csv.DictReader(io.StringIO(invoke(*common, "--format", "csv"))))
    slow_row = next(row for row in rows if row["agent"] == "slow")
    assert (slow_row["verdict"], slow_row["verdict_from"]) == (SLOWER, SEQUENTIAL)


def test_the_summary_and_the_report_open_with_the_decision(
    decided: RunData, store: ResultStore, tmp_path: Path
) -> None:
    found = run_answers(store, "decided")
    assert found is not None
    assert found.decided[0].text == DECIDED_LINE and found.decided[0].verdict == SLOWER
    # The A/A pair stayed open when the budget ended: said once, with a longer budget that
    # would likely decide it (the run's rounds again, then 35 more of its last round's 20 s).
    budget = next(g for g in found.undecided if "budget" in g.reason)
    assert budget.count == 1 and "the budget (6m) ended first" in budget.reason
    assert "about 56 processes a side would likely decide it" in budget.reason
    # 349 s for the run's rounds again, then 40 more rounds as long as its last (20 s).
    assert budget.command == (
        "collector run --agents fast,slow --aa slow --until-decided --budget 21m"
    )
    console = Console(width=200, record=True)
    console.print(rich_answers(found))
    shown = console.export_text()
    assert shown.splitlines()[1].strip() == DECIDED_LINE
    assert "undecided" not in "".join(line for line in shown.splitlines() if "slow is" in line)
    files = write_report(decided, tmp_path / "report", "fast")
    page = files.markdown.read_text()
    assert page.index(DECIDED_LINE) < page.index("## Comparison with fast")
    rows = _slow_rows(page.split("## Comparison with fast")[1].split("## Measured until")[0])
    assert rows and all("undecided" not in row for row in rows), rows
    html = files.html.read_text()
    assert html.index(f'<li class="slower">{DECIDED_LINE}</li>') < html.index("Comparison with")


def test_a_plain_run_opens_with_its_one_reason_and_the_command_once(
    make_run: Callable[..., RunData], store: ResultStore, tmp_path: Path
) -> None:
    """The README's first command before it decided anything: one process a side in every
    cell, so every comparison undecided for one reason, said once with the command that
    would decide it; the table's rows point at one numbered note instead of repeating it."""
    one = {
        cell: processes([median], seed)
        for seed, (cell, median) in enumerate([(CONV, 0.010), (GEMM, 0.5)])
    }
    make_run(
        "plain",
        {"a": one, "b": {CONV: processes([0.02], 7), GEMM: processes([0.4], 8)}, "c": one},
    )
    command = "collector run --agents a,b,c --workloads conv2d,gemm --phases train"
    run = _finish(store, "plain", command=command)
    found = run_answers(store, "plain", use_history=False)
    assert found is not None and not found.decided
    (group,) = found.undecided
    assert group.count == 4
    assert group.text == (
        "4 comparisons undecided: one process a side, nothing measures how much processes differ"
    )
    assert group.command == f"{command} --until-decided --baseline a"
    console = Console(width=200, record=True)
    console.print(rich_answers(found))
    assert "Nothing decided." in console.export_text()
    files = write_report(run, tmp_path / "report", "a")
    page = files.markdown.read_text()
    opening = page.split("## Comparison with a")[0]
    assert group.text in opening and group.command in opening
    # Once under each table: the one line a comparison's, and every figure's.
    glance, every = page.split("### Every figure of every comparison")
    assert glance.count(ONE_PROCESS_NOTE) == 1 and f"1. {ONE_PROCESS_NOTE}" in glance
    assert every.count(ONE_PROCESS_NOTE) == 1
    assert "- note 1 (4 comparisons): " + ONE_PROCESS_NOTE in every
    markdown = formats.markdown(compare_to_baseline(run, "a"), answered=found)
    assert markdown.count(ONE_PROCESS_NOTE) == 1 and markdown.count("| note 1 |") == 4


def test_what_is_decided_comes_first_and_each_reason_once(
    make_run: Callable[..., RunData],
) -> None:
    run = make_run(
        "mixed",
        {
            "a": {CONV: processes([0.010, 0.0101, 0.0099], 1), GEMM: processes([0.5], 2)},
            "b": {CONV: processes([0.020, 0.0201, 0.0199], 3), GEMM: processes([0.4], 4)},
        },
    )
    found = answers(compare_to_baseline(run, "a"), "What run mixed found")
    (line,) = found.decided
    assert line.text.startswith("b is slower than a in conv2d train bs=8: 0.50x [")
    (group,) = found.undecided
    assert group.count == 1 and group.command == ""  # no command recorded with this run


def test_a_long_note_repeated_on_rows_is_said_once() -> None:
    notes = ["noisy, long note", "long note", "other", "long note, kernel"]
    shown, said = footnoted(notes, ["long note", "other", "absent"])
    assert shown == ["noisy, note 1", "note 1", "other", "note 1, kernel"]
    assert said == ["note 1 (3 comparisons): long note"]


def test_a_command_that_would_decide_replaces_options_and_drops_the_folder() -> None:
    given = "collector run --agents a,b --out=/tmp/r --budget 5m --repeat 3 --workloads gemm"
    assert rerun(given, ["--budget", "20m"]) == (
        "collector run --agents a,b --repeat 3 --workloads gemm --budget 20m"
    )
    assert rerun("collector run --agents a,b --out /tmp/r", ["--until-decided"]) == (
        "collector run --agents a,b --until-decided"
    )
    assert rerun("", ["--until-decided"]) == ""


def test_an_agents_modes_against_each_other_name_both(decided: RunData) -> None:
    """`--modes function,xla` of one agent: its xla rows against its function rows, each side
    named with its mode (it said "tf-eigen is faster than tf-eigen")."""
    result = compare_to_baseline(decided, "fast")
    compared = next(c for c in result.comparisons if c.agent == "slow")
    own = replace(compared, agent="fast", mode="xla", baseline_mode="function", verdict=SLOWER)
    (line,) = answers(replace(result, comparisons=[own]), "title").decided
    assert line.text.startswith("fast (xla) is slower than fast (function) in conv2d train")
    assert (line.agent, line.against) == ("fast (xla)", "fast (function)")
