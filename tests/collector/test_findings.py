"""Findings (analysis/findings/, docs/report.md "Findings"): each rule fires on a row set made
to break it, stays silent on a clean one (times per item that fall with batch size, steps that
shorten with threads, agents whose ratio holds across cells), and stays silent where the
intervals overlap. One anomaly gives one finding. The rows are synthetic: medians and their
intervals set by the test, so the figures asserted are the test's own."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest

from fwbench.collector.analysis import findings, formats
from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.findings import (
    BATCH_BACKWARDS,
    INTERFERED,
    OFF_OTHERS,
    OFF_TREND,
    PAST_CEILING,
    RULES,
    SETTINGS_MISMATCH,
    THREADS_BACKWARDS,
    find,
    summary_lines,
)

NO_SAMPLES = pd.DataFrame({"cell": [], "iteration": [], "seconds": []})
# Step times (seconds) of an agent whose steps grow with batch size more slowly than its items:
# time per item falls from 1 ms to 0.33 ms.
NORMAL = {1: 1.0e-3, 2: 1.5e-3, 4: 2.2e-3, 8: 2.6e-3}


def row(
    cell: int,
    agent: str,
    batch: int,
    median: float,
    spread: float = 0.02,
    threads: int = 0,
    workload: str = "gemm",
    **extra: Any,
) -> dict[str, Any]:
    """An ok row whose median's 95% interval is median x (1 -+ spread)."""
    return {
        "cell": cell,
        "agent": agent,
        "mode": "eager",
        "status": "ok",
        "workload": workload,
        "phase": "infer",
        "batch_size": batch,
        "dtype": "float32",
        "threads_requested": threads,
        "params": json.dumps({"m": 8}),
        "strategy": None,
        "median_seconds": median,
        "median_ci_low_seconds": median * (1 - spread),
        "median_ci_high_seconds": median * (1 + spread),
        "items_per_sample": batch,
        "usable_cores": 2,
        **extra,
    }


def sweep(
    agent: str, steps: dict[int, float], first: int = 0, **extra: Any
) -> list[dict[str, Any]]:
    """One row per batch size, cells numbered from `first`."""
    return [row(first + i, agent, b, t, **extra) for i, (b, t) in enumerate(steps.items())]


def run_of(rows: list[dict[str, Any]], metadata: dict[str, Any] | None = None) -> RunData:
    return RunData("synthetic", pd.DataFrame(rows), NO_SAMPLES, metadata or {})


def rules(run: RunData) -> list[str]:
    return [f.rule for f in find(run).findings]


def scaled(steps: dict[int, float], factor: float) -> dict[int, float]:
    return {b: t * factor for b, t in steps.items()}


def test_a_clean_run_has_no_findings_and_says_what_was_checked() -> None:
    rows = [
        *sweep("a", NORMAL),
        *sweep("b", scaled(NORMAL, 2.0), 10),
        *sweep("c", scaled(NORMAL, 0.7), 20, peak_fraction=0.8),
        # a thread sweep whose steps shorten with threads
        row(30, "a", 8, 4.0e-3, threads=1, workload="conv2d"),
        row(31, "a", 8, 2.3e-3, threads=2, workload="conv2d"),
    ]
    found = find(run_of(rows))
    assert found.findings == ()
    assert found.none_line.startswith("no findings: 14 measured cells of 3 agents checked for")
    assert "backwards" in found.none_line and "ceiling" in found.none_line
    assert summary_lines(found) == [found.none_line]


def test_batch_scaling_backwards_beyond_both_intervals() -> None:
    # Per item: 1.0, 0.75, then 1.0 at bs=4 and 1.3 at bs=8: larger batches cost more.
    steps = {1: 1.0e-3, 2: 1.5e-3, 4: 4.0e-3, 8: 10.4e-3}
    (finding,) = find(run_of(sweep("a", steps))).findings
    assert finding.rule == BATCH_BACKWARDS
    # The worst pair: 1.3 ms per item at bs=8 against 0.75 at bs=2.
    assert "1.73x at bs=8 against bs=2" in finding.statement
    assert finding.rule_text == RULES[BATCH_BACKWARDS]
    assert [e.tag for e in finding.evidence] == ["bs=1", "bs=2", "bs=4", "bs=8"]
    last = finding.evidence[-1].record()
    assert last["per_item_seconds"] == pytest.approx(1.3e-3)
    assert last["per_item_ci_low_seconds"] == pytest.approx(1.3e-3 * 0.98)
    assert last["median_ci_high_seconds"] == pytest.approx(10.4e-3 * 1.02)
    assert last["cell"] == "gemm infer bs=8 float32" and last["cells"] == [3]


@pytest.mark.parametrize(
    ("spread", "per_item_at_4"),
    [
        (0.15, 0.9e-3),  # 20% more per item than bs=2's 0.75, intervals overlapping
        (0.01, 0.77e-3),  # intervals apart, but only 3% more: within a process's spread
    ],
)
def test_backwards_within_the_intervals_or_the_minimum_does_not_fire(
    spread: float, per_item_at_4: float
) -> None:
    steps = {1: 1.0e-3, 2: 1.5e-3, 4: 4 * per_item_at_4}
    assert find(run_of(sweep("a", steps, spread=spread))).findings == ()


def test_thread_scaling_backwards_and_its_overlapping_twin() -> None:
    steps = {1: 10e-3, 2: 6e-3, 4: 8.1e-3}
    rows = [row(i, "a", 8, t, threads=n) for i, (n, t) in enumerate(steps.items())]
    (finding,) = find(run_of(rows)).findings
    assert finding.rule == THREADS_BACKWARDS
    assert "1.35x as long at t=4 as at t=2" in finding.statement
    assert "more than its 2 usable cores" in finding.statement
    assert [e.tag for e in finding.evidence] == ["t=1", "t=2", "t=4"]
    wide = [row(i, "a", 8, t, spread=0.2, threads=n) for i, (n, t) in enumerate(steps.items())]
    assert find(run_of(wide)).findings == ()
    # The agent's default (0) is no thread count: nothing to scale against.
    default = [row(0, "a", 8, 6e-3, threads=0), row(1, "a", 8, 9e-3, threads=1)]
    assert find(run_of(default)).findings == ()


def test_ten_times_slower_at_batch_one_is_one_finding() -> None:
    """The issue's case: batch size 1's step 10x batch size 2's, the rest normal, beside an
    agent that scales normally: one finding, not a trend, a backwards pair and an agent's."""
    odd = {1: 10 * NORMAL[2], 2: NORMAL[2], 4: NORMAL[4]}
    rows = [*sweep("slow1", odd), *sweep("fine", NORMAL, 10), *sweep("also", NORMAL, 20)]
    (finding,) = find(run_of(rows)).findings
    assert finding.rule == OFF_TREND
    assert finding.statement.startswith("slow1 gemm infer float32: bs=1 is far off")
    assert "10.0x as long as at bs=2" in finding.statement
    assert "20.0x the time per item" in finding.statement
    assert "other batch sizes scale normally" in finding.statement
    assert [e.agent for e in finding.evidence] == ["slow1"] * 3
    # Three times is not far off: no finding at 2.9x.
    mild = {1: 2.9 * NORMAL[2], 2: NORMAL[2], 4: NORMAL[4]}
    assert OFF_TREND not in rules(run_of(sweep("a", mild)))


def test_a_cell_far_faster_than_its_trend_is_named_itself() -> None:
    # bs=4's step a tenth of what its neighbours say: it, not bs=2 nor bs=8, is off.
    steps = {1: 1.0e-3, 2: 1.5e-3, 4: 0.15e-3, 8: 2.6e-3}
    (finding,) = find(run_of(sweep("a", steps))).findings
    assert finding.rule == OFF_TREND
    assert "bs=4 is far off its own batch trend" in finding.statement
    assert "check that it does the work" in finding.statement


def test_one_agent_far_off_the_others_in_one_cell() -> None:
    # a's bs=2 step is 4x what it should be: not 3x its bs=4 step (no trend finding), and its
    # backwards pair (per item 1.0 -> 3.0) is this anomaly, named once, by the agents' rule.
    odd = {**NORMAL, 2: 4 * NORMAL[2]}
    rows = [*sweep("a", odd), *sweep("b", scaled(NORMAL, 2.0), 10), *sweep("c", NORMAL, 20)]
    (finding,) = find(run_of(rows)).findings
    assert finding.rule == OFF_OTHERS
    assert finding.statement.startswith("a gemm infer bs=2 float32: far off the other agents")
    assert "4.0x off" in finding.statement and "likewise against" in finding.statement
    assert {e.agent for e in finding.evidence} == {"a", "b", "c"}


def test_two_agents_far_apart_in_one_cell_name_both() -> None:
    odd = {**NORMAL, 2: 4 * NORMAL[2]}
    rows = [*sweep("a", odd), *sweep("b", scaled(NORMAL, 2.0), 10)]
    (finding,) = find(run_of(rows)).findings
    assert finding.rule == OFF_OTHERS
    assert finding.statement.startswith("a and b gemm infer bs=2 float32")
    assert "a third agent would tell which" in finding.statement
    # Their ratio is 0.5 in 3 cells and 2.0 in one, but the intervals are wide: nothing.
    wide = [*sweep("a", odd, spread=0.5), *sweep("b", scaled(NORMAL, 2.0), 10, spread=0.5)]
    assert OFF_OTHERS not in rules(run_of(wide))


def test_agents_that_disagree_everywhere_have_no_odd_cell() -> None:
    # a's ratio to b runs 0.5, 1.0, 2.0, 8.0: no cell is off a ratio the others agree on.
    b_steps = {1: 2.0e-3, 2: 1.5e-3, 4: 1.1e-3, 8: 0.9e-3}  # per item falls fast: fine alone
    a_steps = {1: 1.0e-3, 2: 1.5e-3, 4: 2.2e-3, 8: 7.2e-3}
    rows = [*sweep("a", a_steps), *sweep("b", b_steps, 10)]
    assert OFF_OTHERS not in rules(run_of(rows))


def test_rows_past_the_calibrated_ceiling() -> None:
    rows = [
        row(0, "a", 8, 1e-3, peak_fraction=1.34),
        row(1, "a", 4, 1e-3, peak_fraction=0.9),
        row(2, "b", 8, 1e-3, workload="generate", decode_bandwidth_fraction=1.2),
        row(3, "b", 4, 1e-3, workload="generate", decode_bandwidth_fraction=1.0),  # at, not past
        row(4, "c", 8, 1e-3, workload="conv2d", peak_fraction=1.0),
    ]
    observed = {
        "float32": {
            "2": {
                "flops_per_second": 3e11,
                "calibrated_flops_per_second": 2e11,
                "run_id": "synthetic",
                "cell": 4,
            }
        }
    }
    found = find(run_of(rows, {"calibration": {"observed": observed}})).findings
    assert [f.rule for f in found] == [PAST_CEILING] * 3
    assert all(
        "the ceiling is wrong" in f.statement and "or the row is" in f.statement for f in found
    )
    # Ordered by how far past: 1.5x raised, 134%, 120%.
    assert "raised the calibrated float32 ceiling at 2 threads 1.50x" in found[0].statement
    assert found[1].statement.startswith("a gemm infer bs=8 float32 (cell 0): 134% of")
    assert "memory read bandwidth" in found[2].statement
    assert found[1].evidence[0].note == "peak_fraction 1.34"
    # Another run's raise is that run's finding, not this one's.
    observed["float32"]["2"]["run_id"] = "another"
    assert len(find(run_of(rows, {"calibration": {"observed": observed}})).findings) == 2


def test_settings_mismatch_and_interference_are_findings_and_kept_out_of_scaling() -> None:
    mismatch = "threads: asked 4, ran 2"
    why = "other processes used 85% of the agent's 2 CPUs"
    rows = [
        *sweep("a", NORMAL),
        # Interfered: 10x slow at bs=1, which would be off the agent's own trend.
        row(10, "b", 1, 10 * NORMAL[2], interfered=True, interference=why, others_cpu_percent=85),
        *sweep("b", {2: NORMAL[2], 4: NORMAL[4]}, 11),
        # Ran otherwise than asked, and slower per item at bs=8 than bs=4.
        *sweep("c", {2: NORMAL[2], 4: NORMAL[4]}, 20),
        row(22, "c", 8, 20e-3, settings_mismatch=mismatch),
    ]
    found = find(run_of(rows)).findings
    assert [f.rule for f in found] == [INTERFERED, SETTINGS_MISMATCH]
    interfered, mismatched = found
    assert interfered.statement.startswith("b: 1 of its 3 ok rows were measured while other")
    assert why in interfered.statement
    assert interfered.evidence[0].note == why and interfered.evidence[0].cells == (10,)
    assert mismatched.statement.startswith(
        f"c: 1 of its 3 ok rows ran otherwise than asked ({mismatch})"
    )
    assert [e.cells for e in mismatched.evidence] == [(22,)]


def test_only_ok_rows_are_measurements() -> None:
    rows = [
        *sweep("a", NORMAL),
        {**row(9, "a", 16, 1.0), "status": "failed", "peak_fraction": 5.0},
        {**row(10, "a", 32, 1.0), "status": "cancelled", "settings_mismatch": "dtype"},
    ]
    assert find(run_of(rows)).findings == ()


def test_findings_are_ordered_most_severe_first_and_deterministic() -> None:
    rows = [
        *sweep("a", {1: 1.0e-3, 2: 1.5e-3, 4: 4.0e-3}),  # backwards
        *sweep("b", {1: 10 * NORMAL[2], 2: NORMAL[2], 4: NORMAL[4]}, 10),  # off its trend
        row(20, "c", 8, 1e-3, workload="conv2d", peak_fraction=1.1),
        row(21, "c", 4, 1e-3, workload="conv2d", settings_mismatch="dtype: asked a, ran b"),
        *[row(30 + i, "d", 8, t, threads=n) for i, (n, t) in enumerate({1: 5e-3, 2: 7e-3}.items())],
    ]
    order = [OFF_TREND, PAST_CEILING, BATCH_BACKWARDS, THREADS_BACKWARDS, SETTINGS_MISMATCH]
    assert rules(run_of(rows)) == order
    assert list(RULES).index(OFF_TREND) < list(RULES).index(INTERFERED)
    first = [f.record() for f in find(run_of(rows)).findings]
    shuffled = rows[:]
    random.Random(3).shuffle(shuffled)
    assert [f.record() for f in find(run_of(shuffled)).findings] == first


def reps(median: float, seed: int, count: int = 3, n: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [median * rng.lognormal(0.0, 0.02, n) for _ in range(count)]


def test_repetitions_are_pooled_and_every_output_carries_the_findings(
    make_run: Callable[..., RunData],
) -> None:
    """A stored run with samples and 3 repetitions a cell: the finding pools them, and compare's
    JSON, Markdown and terminal table, and the run's summary lines, all show it."""
    run = make_run(
        "pooled",
        {
            "fast": {("gemm", "infer", 1): reps(2e-3, 1), ("gemm", "infer", 2): reps(2e-3, 2)},
            "slow1": {("gemm", "infer", 1): reps(20e-3, 3), ("gemm", "infer", 2): reps(2e-3, 4)},
        },
    )
    found = find(run)
    (finding,) = found.findings
    assert finding.rule == OFF_TREND and finding.statement.startswith("slow1 gemm infer")
    first = finding.evidence[0]
    assert len(first.cells) == 3
    samples = run.samples[run.samples["cell"].isin(first.cells)]["seconds"]
    assert first.median_seconds == pytest.approx(float(np.median(samples)))
    stored = run.results[run.results["cell"].isin(first.cells)]
    assert first.ci_low_seconds == pytest.approx(stored["median_ci_low_seconds"].min())
    assert first.ci_high_seconds == pytest.approx(stored["median_ci_high_seconds"].max())

    result = compare_to_baseline(run, "fast")
    document = json.loads(formats.json_text(result, None, [found]))
    (record,) = document["findings"]
    assert record["rule"] == OFF_TREND and record["run_id"] == "pooled"
    assert record["rule_fired"] == RULES[OFF_TREND]
    assert record["evidence"][0]["repetitions"] == 3
    assert document["findings_checked"]["pooled"].startswith("4 measured cells of 2 agents")
    text = formats.markdown(result, None, [found])
    assert "## Findings (run pooled)" in text and "**off-own-trend**" in text
    assert "| slow1 | function | gemm infer bs=1 float32 | 3 |" in text
    (line,) = summary_lines(found)
    assert line.startswith("finding (off-own-trend): slow1 gemm infer") and "bs=1 " in line


def test_the_cli_and_the_report_show_findings_or_say_there_are_none(
    make_run: Callable[..., RunData], store: Any, tmp_path: Any
) -> None:
    from typer.testing import CliRunner

    from fwbench.collector.cli import app

    make_run(
        "odd",
        {"a": {("gemm", "infer", 1): reps(20e-3, 1, 1), ("gemm", "infer", 2): reps(2e-3, 2, 1)}},
    )
    make_run(
        "clean",
        {"a": {("gemm", "infer", 1): reps(2e-3, 3, 1), ("gemm", "infer", 2): reps(3e-3, 4, 1)}},
    )
    runner = CliRunner()
    table = runner.invoke(app, ["compare", "odd", "clean", "--store", str(store.path)])
    assert table.exit_code == 0, table.output
    assert "run odd: finding (off-own-trend): a gemm infer" in table.output
    assert "run clean: no findings: 2 measured cells of 1 agent checked" in table.output
    every = runner.invoke(app, ["compare", "odd", "clean", "--verbose", "--store", str(store.path)])
    assert "findings in run odd" in every.output and "off-own-trend" in every.output
    out = tmp_path / "report"
    done = runner.invoke(app, ["report", "odd", "--out", str(out), "--store", str(store.path)])
    assert done.exit_code == 0, done.output
    html = (out / "report.html").read_text()
    assert '<h2 id="findings">Findings</h2>' in html and "<strong>off-own-trend</strong>" in html
    assert "gemm infer bs=1 float32" in html and "Rule: a step at one batch size" in html
    markdown = (out / "report.md").read_text()
    assert "## Findings" in markdown and "1. **off-own-trend**" in markdown
    clean = tmp_path / "clean-report"
    done = runner.invoke(app, ["report", "clean", "--out", str(clean), "--store", str(store.path)])
    assert done.exit_code == 0, done.output
    assert (
        '<p id="findings-none">no findings: 2 measured cells' in (clean / "report.html").read_text()
    )


def test_summary_lines_stop_at_the_limit() -> None:
    rows = [row(i, f"agent{i}", 8, 1e-3, peak_fraction=1.1 + i / 100) for i in range(4)]
    lines = summary_lines(find(run_of(rows)), limit=2)
    assert len(lines) == 3 and lines[-1].startswith("... and 2 more finding(s)")
    assert findings.SUMMARY_LINES >= 1


def test_samples_of_as_many_items_at_every_batch_size_have_no_trend() -> None:
    """An accuracy workload's sample is an epoch: as many items at any batch size, and an
    epoch of small batches rightly takes far longer than one of large batches."""
    epochs = {8: 12.0, 32: 3.5, 128: 1.1}
    rows = [row(i, "a", b, t, items_per_sample=1000) for i, (b, t) in enumerate(epochs.items())]
    assert find(run_of(rows)).findings == ()
