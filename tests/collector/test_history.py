"""Tests for fwbench.collector.analysis.history: the host's history of how much an agent's
processes differ, the prior a comparison of one process a side leans on; its false-call rate
by simulation, and what it reads from a real store (which runs, which processes)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from fwbench.collector.analysis import formats
from fwbench.collector.analysis.compare import compare_runs, compare_to_baseline
from fwbench.collector.analysis.contenders import RunData, load_run
from fwbench.collector.analysis.history import (
    MIN_DEGREES,
    earlier_history,
    host_histories,
    host_history,
    margin_histories,
    pooled,
)
from fwbench.collector.stats.margins import NO_HISTORY_MARGIN
from fwbench.collector.stats.samples import sample_stats
from fwbench.collector.stats.significance import (
    DEFAULT_MARGIN,
    EQUIVALENT,
    FASTER,
    SLOWER,
    UNDECIDED,
    ProcessSpread,
    estimate_speedup,
    verdict,
)
from fwbench.collector.store.database import ResultStore

from .conftest import synthetic_row

CONV = ("conv2d", "train", 8)


def _squares(rng: np.random.Generator, sigma: float, processes: int) -> tuple[float, int]:
    logs = rng.normal(0.0, sigma, processes)
    return float(((logs - logs.mean()) ** 2).sum()), processes - 1


def test_pooled_is_the_pooled_sd_with_the_runs_degrees_of_freedom() -> None:
    # two runs whose variances agree exactly: no sign of days differing
    prior = pooled([(0.02, 4), (0.02, 4)])
    assert prior is not None
    assert prior.sd == pytest.approx(math.sqrt(0.04 / 8))
    assert prior.df == 8 and prior.runs == 2 and prior.processes == 10
    assert pooled([(0.02, 9)]) is None  # one run cannot show how much days differ
    assert pooled([(0.01, 1), (0.01, MIN_DEGREES - 2)]) is None  # too few degrees of freedom
    assert pooled([(0.0, 4), (0.0, 4)]) is None  # no spread at all: nothing to lean on


def test_days_that_differ_cut_the_degrees_of_freedom() -> None:
    """Runs whose spreads differ far more than sampling explains (1% one day, 20% another)
    leave the prior few degrees of freedom, so its t interval is wide; runs that agree keep
    nearly all of theirs."""
    rng = np.random.default_rng(5)
    steady, bursty = [], []
    for _ in range(50):
        found = pooled([_squares(rng, 0.05, 8) for _ in range(6)])
        sigmas = (0.01, 0.2, 0.01, 0.2, 0.01, 0.2)
        days = pooled([_squares(rng, sigma, 8) for sigma in sigmas])
        assert found is not None and days is not None
        steady.append(found.df)
        bursty.append(days.df)
    assert max(steady) == 42 and np.median(steady) >= 30  # 48 processes less 6 runs
    assert np.median(bursty) < 4


def _trial(rng: np.random.Generator, draw: Any, days_differ: bool, effect: float = 1.0) -> str:
    """One comparison of one process a side, its prior from 4 earlier runs of 4 processes a
    side, every run's process spread drawn by `draw`; the verdict."""
    priors = []
    for _ in range(2):
        runs = [_squares(rng, draw(), 4) for _ in range(4)]
        found = pooled(runs)
        assert found is not None
        if not days_differ:  # the pooled SD alone, as if every day were alike
            found = ProcessSpread(found.sd, sum(d for _, d in runs), found.processes, 4)
        priors.append(found)
    sigma = draw()
    base = [np.exp(rng.normal(0.0, sigma) + rng.normal(0.0, 0.02, 20))]
    other = [np.exp(rng.normal(0.0, sigma) + rng.normal(0.0, 0.02, 20)) / effect]
    estimate = estimate_speedup(base, other, (priors[0], priors[1]))
    return verdict(estimate, estimate.p_value, 0.03)


def test_false_calls_stay_at_the_nominal_level_when_days_differ() -> None:
    """A/A comparisons of one process a side (nothing to find) on a host whose process spread
    changes from run to run (lognormal around 6%, x/ e^1 between runs: like 2% one hour and
    17.5% the next measured here). The prior called a difference in at most 5% of them; the
    pooled SD alone, ignoring how days differ, in more than 6%. A 1.5x difference is still
    called when the spread is steady."""
    rng = np.random.default_rng(11)

    def bursty() -> float:
        return 0.06 * math.exp(rng.normal(0.0, 1.0))

    trials = 3000
    false = sum(_trial(rng, bursty, True) in (FASTER, SLOWER) for _ in range(trials)) / trials
    naive = sum(_trial(rng, bursty, False) in (FASTER, SLOWER) for _ in range(trials)) / trials
    assert false <= 0.05, false
    assert naive > 0.06, naive  # the simulation could fail: the naive prior does
    steady_calls = [_trial(rng, lambda: 0.08, True, effect=1.5) for _ in range(400)]
    assert steady_calls.count(FASTER) / 400 > 0.8


# --- what a real store gives --------------------------------------------------------------


def _write_run(
    store: ResultStore,
    run_id: str,
    started: str,
    processes: dict[str, list[float]],
    hostname: str = "benchhost",
    same_process: bool = False,
    environment: str = "{}",
) -> RunData:
    """A run whose every agent measured CONV in one process per median given (`same_process`:
    all in one process, as --same-process does)."""
    metadata = {"run_id": run_id, "started_at": started, "host": {"hostname": hostname}}
    store.start_run(run_id, Path("/nonexistent") / run_id, started, metadata)
    cell, rng = 0, np.random.default_rng(len(run_id))
    for agent, medians in processes.items():
        for repetition, median in enumerate(medians):
            pid = 1000 + cell if not same_process else 999
            row = synthetic_row(run_id, cell, agent, CONV, repetition, agent_pid=pid)
            row["environment"] = environment
            ns = np.round(median * rng.lognormal(0.0, 0.005, 30) * 1e9).astype(np.int64)
            row.update(sample_stats(ns.tolist()))
            store.add_result(run_id, row, ns.tolist())
            cell += 1
    return load_run(store, run_id)


def _spread(store: ResultStore, run: RunData, agent: str) -> ProcessSpread | None:
    history = host_history(store, run)
    return next((s for identity, s in history.spreads.items() if identity[0] == agent), None)


def test_history_reads_this_hosts_earlier_processes_that_ran_the_same_way(
    store: ResultStore,
) -> None:
    a, b = [0.010, 0.0105, 0.0098, 0.0102], [0.020, 0.021, 0.0195, 0.0204]
    _write_run(store, "r1", "2026-01-01T00:00:00", {"a": a, "b": b})
    _write_run(store, "r2", "2026-01-02T00:00:00", {"a": a[::-1], "b": b[::-1]})
    # an A/A twin is a process of the same agent
    _write_run(store, "r3", "2026-01-03T00:00:00", {"a": a[:2], "a#2": a[2:]})
    now = _write_run(store, "now", "2026-01-04T00:00:00", {"a": [0.010], "b": [0.020]})
    # never counted: another host, a later run, other environment switches, one process
    _write_run(
        store,
        "elsewhere",
        "2026-01-02T00:00:00",
        {"a": [0.01, 0.03, 0.01, 0.03]},
        hostname="otherhost",
    )
    _write_run(store, "later", "2026-01-05T00:00:00", {"a": [0.01, 0.03, 0.01, 0.03]})
    _write_run(
        store,
        "malloc",
        "2026-01-02T00:00:00",
        {"a": [0.01, 0.03, 0.01, 0.03]},
        environment=json.dumps({"MALLOC_ARENA_MAX": "1"}),
    )
    _write_run(
        store, "one", "2026-01-02T00:00:00", {"a": [0.01, 0.03, 0.01, 0.03]}, same_process=True
    )
    spread = _spread(store, now, "a")
    assert spread is not None and spread.runs == 3 and spread.processes == 12
    logs = [np.log(a) - np.log(a).mean(), np.log(a) - np.log(a).mean()]
    twin = [np.log(a[:2] + a[2:]) - np.log(a[:2] + a[2:]).mean()]  # one run, one agent
    squares = sum(float((x**2).sum()) for x in logs + twin)
    assert spread.sd == pytest.approx(math.sqrt(squares / 9), rel=0.02)
    assert _spread(store, load_run(store, "r1"), "a") is None  # as of r1: one run only


def test_a_run_being_measured_reads_only_the_runs_before_it(store: ResultStore) -> None:
    """--until-decided's margin (stats/margins.py) must not depend on the run's own data: its
    host's history then leaves out the run itself, and runs that started with or after it."""
    a = [0.010, 0.0105, 0.0098, 0.0102]
    for day in (1, 2):
        _write_run(store, f"r{day}", f"2026-01-0{day}T00:00:00", {"a": a, "b": a})
    _write_run(store, "same-time", "2026-01-03T00:00:00", {"a": [0.01, 0.03, 0.01, 0.03]})
    _write_run(store, "later", "2026-01-05T00:00:00", {"a": [0.01, 0.03, 0.01, 0.03]})
    now = _write_run(store, "now", "2026-01-03T00:00:00", {"a": [0.01, 0.03, 0.01, 0.03]})
    row = store.rows("now")[0]
    spread = earlier_history(store, "now", now.metadata).of_row(row)
    assert spread is not None and (spread.runs, spread.processes) == (2, 8)
    centred = np.log(a) - np.log(a).mean()
    assert spread.sd == pytest.approx(math.sqrt(2 * float((centred**2).sum()) / 6), rel=0.05)
    # compare's history of the same run takes the runs that started no later, itself included
    assert _spread(store, now, "a").runs == 4  # type: ignore[union-attr]
    other = dict(row, cpu_model="another CPU")  # ran another way: no history
    assert earlier_history(store, "now", now.metadata).of_row(other) is None


def test_one_process_a_side_leans_on_the_hosts_history(store: ResultStore) -> None:
    """Undecided without history (nothing measured how much processes differ); with this
    host's history of both agents (processes within 2-3%), a 2x difference of one process a
    side is called, saying so; --no-host-history (history None) keeps it undecided."""
    a, b = [0.010, 0.0103, 0.0098, 0.0101], [0.020, 0.0206, 0.0195, 0.0202]
    for day in range(3):
        _write_run(store, f"r{day}", f"2026-01-0{day + 1}T00:00:00", {"a": a, "b": b})
    now = _write_run(store, "now", "2026-01-05T00:00:00", {"a": [0.010], "b": [0.021]})
    history = host_history(store, now)
    (leaning,) = compare_to_baseline(now, "a", history=history).comparisons
    assert leaning.evidence == "host history" and leaning.method == "host history"
    assert leaning.verdict == SLOWER and leaning.ci_high < 1 / 1.03
    assert "host history (SD between processes): a " in leaning.notes
    assert "(3 runs, 12 processes)" in leaning.notes
    # the terminal's table says it without the counts, the other formats with them
    console = Console(width=300, record=True)
    console.print(formats.rich_table(compare_to_baseline(now, "a", history=history)))
    shown = re.sub(r"[│\s]+", " ", console.export_text())
    assert "host history, SD between processes: a " in shown and "processes)" not in shown
    (alone,) = compare_to_baseline(now, "a").comparisons
    assert alone.verdict == UNDECIDED and alone.evidence == "one process"
    assert math.isnan(alone.p_adjusted)  # never called, so not counted in Holm's family
    # regression tracking: the same agent in two runs of one process each
    later = _write_run(store, "later", "2026-01-06T00:00:00", {"a": [0.0150], "b": [0.021]})
    histories = (history, host_history(store, later))
    assert host_histories(store, [now, later]) == list(histories)  # one read, each as of its run
    changed = {c.agent: c for c in compare_runs(now, later, 0.05, histories=histories).comparisons}
    assert changed["a"].verdict == SLOWER and changed["a"].evidence == "host history"
    assert changed["b"].verdict != SLOWER


def test_cli_compare_and_report_use_the_history_unless_told_not_to(
    store: ResultStore, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from fwbench.collector.cli import app

    a, b = [0.010, 0.0103, 0.0098, 0.0101], [0.020, 0.0206, 0.0195, 0.0202]
    for day in range(3):
        _write_run(store, f"r{day}", f"2026-01-0{day + 1}T00:00:00", {"a": a, "b": b})
    _write_run(store, "now", "2026-01-05T00:00:00", {"a": [0.010], "b": [0.021]})
    base = ["compare", "now", "--baseline", "a", "--format", "json", "--store", str(store.path)]
    evidence = []
    for extra in ([], ["--no-host-history"]):
        done = CliRunner().invoke(app, [*base, *extra])
        assert done.exit_code == 0, done.output
        (only,) = json.loads(done.output)["comparisons"]
        evidence.append((only["evidence"], only["verdict"]))
    assert evidence == [("host history", SLOWER), ("one process", UNDECIDED)]
    out = tmp_path / "report"
    args = ["report", "now", "--baseline", "a", "--out", str(out), "--store", str(store.path)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    assert "host history (SD between processes)" in (out / "report.md").read_text()


def test_an_undecided_prior_comparison_says_how_many_processes_would_decide(
    store: ResultStore,
) -> None:
    """With --repeat the processes become the evidence, so the estimate is Welch's at the
    priors' spread (here about 1.5%), not the prior's own interval: a 4% difference from one
    process a side is undecided, and a handful of processes a side would decide it, which a
    simulation of Welch's test at that spread confirms."""
    a = [0.0100, 0.0102, 0.0098, 0.0101]
    b = [0.0104, 0.0106, 0.0102, 0.0105]
    for day in range(2):
        _write_run(store, f"r{day}", f"2026-01-0{day + 1}T00:00:00", {"a": a, "b": b})
    now = _write_run(store, "now", "2026-01-05T00:00:00", {"a": [0.0100], "b": [0.0107]})
    (close,) = compare_to_baseline(now, "a", history=host_history(store, now)).comparisons
    assert close.verdict == UNDECIDED and close.evidence == "host history"
    found = re.search(r"about (\d+) repetitions a side", close.notes)
    assert found is not None, close.notes
    needed = int(found.group(1))
    assert 2 <= needed <= 12
    # Welch's test at that many processes a side, at the spread the priors give, calls the
    # difference about half the time (the estimate is where the interval, centred on what was
    # measured, just clears the floor), and far more often than at half as many
    rng, sd = np.random.default_rng(3), close.prior_sd / math.sqrt(2)

    def called(processes: int) -> float:
        calls = 0
        for _ in range(400):
            base = [np.full(5, x) for x in np.exp(rng.normal(0.0, sd, processes)) * 0.0100]
            other = [np.full(5, x) for x in np.exp(rng.normal(0.0, sd, processes)) * 0.0107]
            estimate = estimate_speedup(base, other)
            calls += verdict(estimate, estimate.p_value, 0.03) == SLOWER
        return calls / 400

    at_estimate, at_half = called(needed), called(max(2, needed // 2))
    assert at_estimate > 0.35 and at_half < at_estimate - 0.15, (needed, at_estimate, at_half)


# --- equivalence margins from the runs before (stats/margins.py) ---------------------------

STEADY = [0.0100, 0.0102, 0.0098, 0.0101, 0.0099, 0.0100]  # processes about 1.4% apart
NOISY = [0.0100, 0.0106, 0.0094, 0.0108, 0.0093, 0.0101]  # about 6% apart


def test_compare_takes_each_margin_from_the_runs_before_the_one_compared(
    store: ResultStore,
) -> None:
    """An A/A pair 4% apart, processes 1.4% apart: not within the default 5%, but within the
    8-9% that this host's earlier runs measured for one process against another; never from the
    run's own data, a later run or --margin's absence of history."""
    for day in (1, 2):
        _write_run(store, f"r{day}", f"2026-01-0{day}T00:00:00", {"a": NOISY, "a#2": NOISY[::-1]})
    _write_run(store, "later", "2026-01-09T00:00:00", {"a": STEADY, "a#2": STEADY})
    now = _write_run(
        store, "now", "2026-01-05T00:00:00", {"a": STEADY, "a#2": [x * 1.04 for x in STEADY]}
    )
    (margins,) = margin_histories(store, [now])
    (judged,) = compare_to_baseline(now, "a", margins=margins).comparisons
    expected = earlier_history(store, "now", now.metadata).of_row(store.rows("now")[0])
    assert expected is not None and expected.runs == 2  # r1 and r2: not now, not later
    assert judged.margin == pytest.approx(math.expm1(math.sqrt(2) * expected.sd))
    assert 0.08 < judged.margin < 0.10
    assert judged.margin_from.startswith("from this host's earlier runs: one process of each")
    assert (
        "a#2's processes 5.8% apart" in judged.margin_from and "over 2 runs" in judged.margin_from
    )
    assert judged.verdict == EQUIVALENT, judged
    # the same data within the default 5% (no history, or --margin 0.05) is not settled
    for kept in (
        compare_to_baseline(now, "a"),
        compare_to_baseline(now, "a", margin=0.05, margins=margins),
    ):
        (alone,) = kept.comparisons
        assert alone.margin == DEFAULT_MARGIN and alone.verdict == UNDECIDED
    assert compare_to_baseline(now, "a").comparisons[0].margin_from == NO_HISTORY_MARGIN
    given = compare_to_baseline(now, "a", margin=0.05, margins=margins)
    assert given.comparisons[0].margin_from == "--margin" and given.margin == 0.05
    record = formats.record(judged)
    assert record["equivalence_margin_from"] == judged.margin_from
    shown = formats.markdown(compare_to_baseline(now, "a", margins=margins))
    assert f"3.0% / ±{judged.margin:.1%}" in shown and "the comparison's margin" in shown


def test_between_runs_the_margin_comes_from_the_runs_before_both(store: ResultStore) -> None:
    for day in (1, 2):
        _write_run(store, f"r{day}", f"2026-01-0{day}T00:00:00", {"a": NOISY})
    first = _write_run(store, "A", "2026-01-03T00:00:00", {"a": STEADY})
    _write_run(store, "between", "2026-01-04T00:00:00", {"a": STEADY})  # after A: not counted
    second = _write_run(store, "B", "2026-01-05T00:00:00", {"a": [x * 1.04 for x in STEADY]})
    before = margin_histories(store, [first, second])
    (judged,) = compare_runs(first, second, 0.03, margins=(before[0], before[1])).comparisons
    assert judged.margin_from.startswith("from the runs before run A: ")
    assert "run B's a " in judged.margin_from and "run A's a " in judged.margin_from
    assert "over 2 runs, 12 processes" in judged.margin_from  # r1 and r2 only
    assert 0.08 < judged.margin < 0.10 and judged.verdict == EQUIVALENT
    assert compare_runs(first, second, 0.03).comparisons[0].verdict == UNDECIDED


def test_cli_compare_and_report_take_the_margins_from_the_runs_before(
    store: ResultStore, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from fwbench.collector.cli import app

    for day in (1, 2):
        _write_run(store, f"r{day}", f"2026-01-0{day}T00:00:00", {"a": NOISY, "a#2": NOISY[::-1]})
    _write_run(
        store, "now", "2026-01-05T00:00:00", {"a": STEADY, "a#2": [x * 1.04 for x in STEADY]}
    )
    base = ["compare", "now", "--baseline", "a", "--format", "json", "--store", str(store.path)]
    seen = []
    for extra in ([], ["--margin", "0.05"], ["--no-host-history"]):
        done = CliRunner().invoke(app, [*base, *extra])
        assert done.exit_code == 0, done.output
        document = json.loads(done.output)
        (only,) = document["comparisons"]
        seen.append((document["equivalence_margin"], only["verdict"]))
        seen.append(only["equivalence_margin_from"].split(":")[0])
    assert seen == [
        (None, EQUIVALENT),
        "from this host's earlier runs",
        (0.05, UNDECIDED),
        "--margin",
        (None, UNDECIDED),
        "by default",
    ]
    out = tmp_path / "report"
    args = ["report", "now", "--baseline", "a", "--out", str(out), "--store", str(store.path)]
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    text = (out / "report.md").read_text()
    assert "| floor / margin |" in text and "3.0% / ±8.5%" in text and "| equivalent |" in text
