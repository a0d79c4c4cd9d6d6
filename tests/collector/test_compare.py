"""Tests for fwbench.collector.analysis.compare and formats: comparisons against a baseline with
an A/A pair, regression tracking between runs, and the output formats."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from fwbench.collector.analysis import formats
from fwbench.collector.analysis.compare import compare_runs, compare_to_baseline
from fwbench.collector.analysis.comparison import Comparison
from fwbench.collector.analysis.contenders import (
    ComparisonError,
    RunData,
    contenders,
    samples_by_cell,
)
from fwbench.collector.stats.significance import (
    EQUIVALENCE_ALPHA,
    EQUIVALENT,
    FASTER,
    SLOWER,
    UNDECIDED,
    equivalence_p,
    estimate_speedup,
)

CONV = ("conv2d", "train", 8)
GEMM = ("gemm", "train", 8)


def reps(median: float, seed: int, count: int = 3, n: int = 60, spread: float = 0.03) -> list:
    rng = np.random.default_rng(seed)
    return [median * rng.lognormal(0.0, spread, n) for _ in range(count)]


@pytest.fixture
def run(make_run: Callable[..., RunData]) -> RunData:
    """tf-eigen the baseline and its A/A twin, tf-mkl 2.3x faster at conv2d and equal at gemm,
    torch-cpu 2x slower at gemm and missing conv2d."""
    return make_run(
        "run-a",
        {
            "tf-eigen": {CONV: reps(0.080, 1), GEMM: reps(0.50, 2)},
            "tf-mkl": {CONV: reps(0.080 / 2.3, 3), GEMM: reps(0.50, 4)},
            "tf-eigen#2": {CONV: reps(0.080, 5), GEMM: reps(0.50, 6)},
            "torch-cpu": {GEMM: reps(1.0, 7)},
        },
    )


def by_agent(result: Any, workload: str) -> dict[str, Any]:
    return {c.agent: c for c in result.comparisons if c.key[0] == workload}


def test_contenders_group_repetitions(run: RunData) -> None:
    cells = contenders(run)
    assert len(cells) == 7
    conv = next(c for c in cells if c.agent == "tf-eigen" and c.key[0] == "conv2d")
    assert len(conv.groups) == 3 and conv.n == 180
    assert conv.key == ("conv2d", "train", 8, "float32", 0, '{"m": 8}', None)


def test_a_world_strategy_is_its_own_cell_never_a_repetition(run: RunData) -> None:
    """A world measured under two strategies ran two computations: the strategy is part of the
    cell, so neither pools the other's samples as repetitions."""
    results = run.results.copy()
    twin = results["agent"] == "tf-eigen"
    results.loc[twin, "strategy"] = ["ddp", "pipeline", "ddp", "pipeline", "ddp", "pipeline"]
    cells = contenders(RunData(run.run_id, results, run.samples, run.metadata))
    eigen = [c for c in cells if c.agent == "tf-eigen"]
    assert sorted(c.key[-1] for c in eigen) == ["ddp", "ddp", "pipeline", "pipeline"]
    assert {len(c.groups) for c in eigen} == {1, 2}


def test_compare_to_baseline_verdicts(run: RunData) -> None:
    result = compare_to_baseline(run, "tf-eigen")
    conv, gemm = by_agent(result, "conv2d"), by_agent(result, "gemm")
    assert conv["tf-mkl"].verdict == FASTER
    assert conv["tf-mkl"].speedup == pytest.approx(2.3, rel=0.05)
    assert conv["tf-mkl"].ci_low > 2.0
    assert conv["tf-mkl"].p_adjusted < 0.05
    assert conv["tf-mkl"].method == "processes"  # 3 repetitions a side: Welch over them
    assert gemm["tf-mkl"].verdict == EQUIVALENT
    assert gemm["tf-mkl"].evidence == "processes"
    assert gemm["torch-cpu"].verdict == SLOWER
    for aa in (conv["tf-eigen#2"], gemm["tf-eigen#2"]):
        assert aa.verdict == EQUIVALENT
        assert aa.notes == "A/A"
        assert aa.noise_floor == 0.03  # judged against the default floor only
    assert result.skipped == []  # torch-cpu has no conv2d: nothing to compare, nothing skipped


def test_compare_to_baseline_noise_floor_from_aa(make_run: Callable[..., RunData]) -> None:
    # The A/A twin measured itself 8% apart in gemm: a 6% "win" there is equivalent within
    # that noise, while the same 6% in conv2d (A/A 0%) with the default floor of 3% is a win.
    run = make_run(
        "noisy",
        {
            "a": {GEMM: reps(1.0, 1, spread=0.002), CONV: reps(1.0, 2, spread=0.002)},
            "a#2": {GEMM: reps(1.08, 3, spread=0.002), CONV: reps(1.0, 4, spread=0.002)},
            "b": {GEMM: reps(1 / 1.06, 5, spread=0.002), CONV: reps(1 / 1.06, 6, spread=0.002)},
        },
    )
    result = compare_to_baseline(run, "a")
    assert result.measured_floor == pytest.approx(0.08, abs=0.005)
    gemm, conv = by_agent(result, "gemm")["b"], by_agent(result, "conv2d")["b"]
    assert gemm.noise_floor == pytest.approx(0.08, abs=0.005)
    assert gemm.verdict == EQUIVALENT  # within the floor, which widens the margin to 8%
    assert conv.noise_floor == pytest.approx(0.03, abs=0.001)
    assert conv.verdict == FASTER
    # The twin itself: 8% apart, beyond the default floor, so the machine is noisier than
    # 3% here and the comparison says so.
    assert by_agent(result, "gemm")["a#2"].verdict == SLOWER


def test_compare_to_baseline_unknown_baseline_names_agents(run: RunData) -> None:
    with pytest.raises(ComparisonError, match="tf-eigen, tf-mkl"):
        compare_to_baseline(run, "jax-cpu")


def test_compare_to_baseline_holm_adjusts(run: RunData) -> None:
    result = compare_to_baseline(run, "tf-eigen")
    for comparison in result.comparisons:
        assert comparison.p_adjusted >= comparison.p_value


def test_compare_runs_flags_regression_beyond_threshold(make_run: Callable[..., RunData]) -> None:
    before = make_run("before", {"x": {CONV: reps(0.010, 1), GEMM: reps(0.5, 2)}})
    after = make_run(
        "after",
        {"x": {CONV: reps(0.0125, 3), GEMM: reps(0.5 * 1.02, 4)}, "y": {GEMM: reps(0.5, 5)}},
    )
    result = compare_runs(before, after, threshold=0.05)
    conv, gemm = by_agent(result, "conv2d")["x"], by_agent(result, "gemm")["x"]
    assert conv.verdict == SLOWER  # 25% slower
    assert conv.speedup == pytest.approx(0.8, rel=0.03)
    assert gemm.verdict == EQUIVALENT  # 2%, within the 5% threshold
    assert conv.baseline == "before"
    assert result.skipped == ["y gemm train bs=8 float32: not in run before"]


def test_formats_agree(run: RunData) -> None:
    result = compare_to_baseline(run, "tf-eigen")
    document = json.loads(formats.json_text(result))
    assert len(document["comparisons"]) == len(result.comparisons) == 5
    mkl = next(
        c for c in document["comparisons"] if c["agent"] == "tf-mkl" and c["workload"] == "conv2d"
    )
    assert mkl["verdict"] == FASTER and mkl["speedup_ci_low"] > 2 and mkl["method"] == "processes"
    assert document["measured_noise_floor"] is not None
    assert {a["other"] for a in document["aa"]} == {"tf-eigen#2"}
    rows = list(csv.DictReader(io.StringIO(formats.csv(result))))
    assert [r["verdict"] for r in rows] == [c.verdict for c in result.comparisons]
    text = formats.markdown(result)
    assert text.count("\n| conv2d train bs=8 float32 |") == 2
    assert "A/A (tf-eigen / tf-eigen#2; 2 cells)" in text


def test_one_process_a_side_without_an_aa_pair_is_undecided(
    make_run: Callable[..., RunData],
) -> None:
    """Two processes 2x apart say nothing about the agents when nothing measured how much two
    processes of one agent differ (here they may differ 1.6x): undecided, saying what would
    decide it. With an A/A pair in the run, its difference is the floor and a verdict is
    made."""
    single = make_run(
        "single",
        {"a": {CONV: reps(0.02, 1, count=1)}, "b": {CONV: reps(0.01, 2, count=1)}},
    )
    result = compare_to_baseline(single, "a")
    (only,) = result.comparisons
    assert only.verdict == UNDECIDED and only.evidence == "one process"
    assert (
        "how much processes differ is unknown; --until-decided (or --repeat 3 and more) decides"
        in only.notes
    )
    # The terminal's table says it short on each row; its caption says why once.
    console = Console(width=200, record=True)
    console.print(formats.rich_table(result))
    shown = re.sub(r"[│\s]+", " ", console.export_text())
    assert "one process a side: --repeat 3 (or more)" in shown and "unknown;" not in shown
    assert "Verdicts need repetitions on both sides, this host's history of both" in shown
    with_aa = make_run(
        "with-aa",
        {
            "a": {CONV: reps(0.02, 1, count=1)},
            "a#2": {CONV: reps(0.021, 3, count=1)},
            "b": {CONV: reps(0.01, 2, count=1)},
        },
    )
    called = by_agent(compare_to_baseline(with_aa, "a"), "conv2d")
    assert called["b"].verdict == FASTER and called["b"].evidence == "A/A floor"
    assert called["a#2"].verdict == UNDECIDED  # the A/A pair cannot be its own prior
    before = make_run("before-1", {"x": {CONV: reps(0.010, 1, count=1)}})
    after = make_run("after-1", {"x": {CONV: reps(0.020, 2, count=1)}})
    (regression,) = compare_runs(before, after, threshold=0.05).comparisons
    assert regression.verdict == UNDECIDED and "--repeat 3" in regression.notes


def test_undecided_says_how_many_repetitions_would_decide(
    make_run: Callable[..., RunData],
) -> None:
    def compared(spread: float) -> Comparison:
        run = make_run(
            f"close-{spread}",
            {
                "a": {CONV: reps(0.010, 1, count=2, spread=spread, n=5)},
                "b": {CONV: reps(0.0108, 2, count=2, spread=spread, n=5)},
            },
        )
        (close,) = compare_to_baseline(run, "a").comparisons
        assert close.verdict == UNDECIDED and close.evidence == "processes"
        return close

    close = compared(0.05)
    assert re.search(r"about \d+ repetitions a side would likely decide it", close.notes)
    noisy = compared(0.2)  # processes 20% apart: too many to suggest, said as such
    assert "more than 100 repetitions a side would be needed" in noisy.notes, noisy.notes


# --- the `collector compare` and `collector report` commands ----------------------------------


def invoke(*args: str) -> Any:
    from typer.testing import CliRunner

    from fwbench.collector.cli import app

    return CliRunner().invoke(app, list(args))


def test_cli_compare_json_and_errors(run: RunData, store: Any, tmp_path: Any) -> None:
    done = invoke(
        "compare", "run-a", "--baseline", "tf-eigen", "--format", "json", "--store", str(store.path)
    )
    assert done.exit_code == 0, done.output
    document = json.loads(done.output)
    assert {c["verdict"] for c in document["comparisons"]} == {FASTER, SLOWER, EQUIVALENT}
    missing = invoke("compare", "run-a", "--store", str(store.path))
    assert missing.exit_code == 2
    assert "needs --baseline" in missing.output and "tf-mkl" in missing.output
    unknown = invoke("compare", "nope", "--baseline", "x", "--store", str(store.path))
    assert unknown.exit_code == 2 and "no run 'nope'" in unknown.output
    bad = invoke(
        "compare", "run-a", "--baseline", "tf-eigen", "--format", "xml", "--store", str(store.path)
    )
    assert bad.exit_code == 2 and "xml" in bad.output and "markdown" in bad.output


def test_cli_compare_two_runs(run: RunData, store: Any) -> None:
    table = invoke("compare", "run-a", "run-a", "--store", str(store.path))
    assert table.exit_code == 0, table.output
    assert table.output.count("equivalent ±5.0%") == 7  # one line a comparison
    every = invoke("compare", "run-a", "run-a", "--verbose", "--store", str(store.path))
    assert "Noise floor 5.0% (--threshold; no A/A pair measured it)" in every.output
    done = invoke("compare", "run-a", "run-a", "--format", "json", "--store", str(store.path))
    verdicts = [c["verdict"] for c in json.loads(done.output)["comparisons"]]
    assert verdicts == [EQUIVALENT] * 7  # a run against itself


def test_cli_report_writes_to_out(run: RunData, store: Any, tmp_path: Any) -> None:
    out = tmp_path / "rep"
    done = invoke(
        "report", "run-a", "--baseline", "tf-eigen", "--out", str(out), "--store", str(store.path)
    )
    assert done.exit_code == 0, done.output
    assert (out / "report.html").is_file() and (out / "report.md").is_file()
    assert (out / "figures" / "relative_time.png").is_file()


def test_cli_takes_a_run_folder_for_its_id(run: RunData, store: Any, tmp_path: Any) -> None:
    # `collector run --out FOLDER` prints the folder; compare and report take it as the run.
    folder = tmp_path / "run-a"
    folder.mkdir(exist_ok=True)
    (folder / "run.json").write_text(json.dumps({"run_id": "run-a"}))
    by_folder = invoke(
        "compare",
        str(folder),
        "--baseline",
        "tf-eigen",
        "--format",
        "json",
        "--store",
        str(store.path),
    )
    by_id = invoke(
        "compare", "run-a", "--baseline", "tf-eigen", "--format", "json", "--store", str(store.path)
    )
    assert by_folder.exit_code == 0, by_folder.output
    assert json.loads(by_folder.output) == json.loads(by_id.output)
    done = invoke("report", str(folder), "--baseline", "tf-eigen", "--store", str(store.path))
    assert done.exit_code == 0, done.output
    assert (folder / "report" / "report.html").is_file()  # the run's own folder, by default
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = invoke("report", str(empty), "--store", str(store.path))
    assert refused.exit_code == 2 and "without a readable run.json" in refused.output


def test_cli_results_exports_samples(run: RunData, store: Any, tmp_path: Any) -> None:
    target = tmp_path / "samples.csv"
    done = invoke(
        "results", "run-a", "--samples", "--export", str(target), "--store", str(store.path)
    )
    assert done.exit_code == 0, done.output
    lines = target.read_text().splitlines()
    assert lines[0] == "cell,iteration,seconds"
    assert len(lines) == 1 + 7 * 3 * 60


def test_equivalence_p_agrees_with_the_interval_it_stands_for() -> None:
    """Alone, TOST at 2.5% a side is the 95% interval within the margin: equivalence_p below
    2.5% exactly when estimate_speedup's interval lies within [1 / bound, bound]."""
    rng = np.random.default_rng(11)
    agreed = 0
    for trial in range(200):
        count = 2 + trial % 4
        base = [rng.lognormal(0.0, 0.01, 20) * rng.lognormal(0.0, 0.03) for _ in range(count)]
        ratio = rng.uniform(0.93, 1.07)
        other = [g / ratio * rng.lognormal(0.0, 0.03) for g in base]
        estimate, p = estimate_speedup(base, other), equivalence_p(base, other, 1.05)
        within = estimate.ci_low >= 1 / 1.05 and estimate.ci_high <= 1.05
        agreed += within == (p < EQUIVALENCE_ALPHA)
    assert agreed == 200


def test_false_equivalence_is_held_over_all_the_comparisons_shown_together(
    make_run: Callable[..., RunData],
) -> None:
    """Eight cells where the contender is exactly at the margin (5% slower): no comparison is
    equivalent, so any "equivalent" is false. Per comparison the 95% interval falls inside
    the margin at most 2.5% of the time, but over eight of them (seeded: 18 of 200 runs) at
    least one does, which the rule before Holm called equivalent; with Holm over the
    equivalence tests, at most 2.5% of runs (sampling error allowed; seeded: none)."""
    cells = [("gemm", "train", b) for b in range(1, 9)]
    rng = np.random.default_rng(5)

    def sides() -> dict[str, dict[Any, list]]:
        def side(scale: float) -> list:
            return [scale * rng.lognormal(0, 0.02) * rng.lognormal(0, 0.005, 30) for _ in "abc"]

        return {
            "base": {cell: side(0.1) for cell in cells},
            "other": {cell: side(0.1 * 1.05) for cell in cells},
        }

    template = make_run("margin", sides())
    rows = template.results.set_index("cell")
    where = {  # each sample group's place in the samples table, and whose repetition it is
        cell: (
            positions,
            str(rows.at[cell, "agent"]),
            ("gemm", "train", int(rows.at[cell, "batch_size"])),
            int(rows.at[cell, "repetition"]),
        )
        for cell, positions in template.samples.groupby("cell").indices.items()
    }
    trials, runs_with_a_false_call, intervals_inside = 200, 0, 0
    for _ in range(trials):
        values, seconds = sides(), template.samples["seconds"].to_numpy(copy=True)
        for positions, agent, key, repetition in where.values():
            seconds[positions] = values[agent][key][repetition][: len(positions)]
        samples = template.samples.assign(seconds=seconds)
        result = compare_to_baseline(RunData("margin", template.results, samples), "base")
        assert len(result.comparisons) == 8
        runs_with_a_false_call += any(c.verdict == EQUIVALENT for c in result.comparisons)
        intervals_inside += any(
            c.ci_low >= 1 / 1.05 and c.ci_high <= 1.05 for c in result.comparisons
        )
    assert (
        runs_with_a_false_call / trials <= EQUIVALENCE_ALPHA + 3 * (0.025 * 0.975 / trials) ** 0.5
    )
    assert intervals_inside / trials > 0.08  # the per-comparison rule alone would not hold it


def _failing(run: RunData, agent: str, workload: str, repetitions: list[int]) -> RunData:
    """`run` with `agent`'s `repetitions` of `workload` failed (their samples still stored)."""
    results = run.results.copy()
    hit = (results["agent"] == agent) & (results["workload"] == workload)
    hit &= results["repetition"].isin(repetitions)
    results.loc[hit, "status"] = "failed"
    results.loc[hit, "error_code"] = "UNAVAILABLE"
    results.loc[hit, "error"] = "agent crashed during this cell: exit code -9"
    return RunData(run.run_id, results, run.samples, run.metadata)


def test_a_side_with_failed_processes_is_never_called(run: RunData) -> None:
    """tf-mkl is 2.3x faster at conv2d in the two processes that finished, but its third
    failed: that one could have been the slow one, so nothing is called; the other cells'
    comparisons are untouched, and a cell whose every process failed is named."""
    broken = _failing(_failing(run, "tf-mkl", "conv2d", [1]), "torch-cpu", "gemm", [0, 1, 2])
    result = compare_to_baseline(broken, "tf-eigen")
    conv, gemm = by_agent(result, "conv2d"), by_agent(result, "gemm")
    failed = conv["tf-mkl"]
    assert failed.verdict == UNDECIDED and failed.evidence == "failed processes"
    assert "1 of tf-mkl's 3 processes failed here (UNAVAILABLE: agent crashed" in failed.notes
    assert "cannot stand for the failed ones" in failed.notes
    assert math.isnan(failed.p_adjusted) and math.isnan(failed.p_equivalent_adjusted)
    assert failed.speedup == pytest.approx(2.3, rel=0.05)  # still shown, from the two
    assert conv["tf-eigen#2"].verdict == EQUIVALENT  # the baseline's own processes all ran
    assert gemm["tf-mkl"].verdict == EQUIVALENT and "torch-cpu" not in gemm
    assert result.skipped == [
        "torch-cpu gemm train bs=8 float32: every process failed (UNAVAILABLE: agent crashed "
        "during this cell: exit code -9)"
    ]
    # The baseline's failure reaches every comparison against it in that cell.
    base_failed = compare_to_baseline(_failing(run, "tf-eigen", "gemm", [2]), "tf-eigen")
    for comparison in by_agent(base_failed, "gemm").values():
        assert comparison.verdict == UNDECIDED, comparison
        assert "1 of tf-eigen's 3 processes failed here" in comparison.notes


def test_between_runs_a_failed_process_in_either_run_is_named_by_its_run(
    make_run: Callable[..., RunData],
) -> None:
    before = make_run("before", {"tf-mkl": {CONV: reps(0.080, 11)}})
    after = make_run("after", {"tf-mkl": {CONV: reps(0.040, 12)}})
    assert compare_runs(before, after, 0.03).comparisons[0].verdict == FASTER
    changed = compare_runs(_failing(before, "tf-mkl", "conv2d", [0]), after, 0.03)
    (comparison,) = changed.comparisons
    assert comparison.verdict == UNDECIDED
    assert "1 of run before's tf-mkl's 3 processes failed here" in comparison.notes


def test_a_side_that_ran_otherwise_than_asked_is_never_called(run: RunData) -> None:
    """tf-mkl's conv2d processes ran one thread where two were asked: the 2.3x is true for
    what ran, not for the question asked, so it is not called; gemm is untouched."""
    results = run.results.copy()
    hit = (results["agent"] == "tf-mkl") & (results["workload"] == "conv2d")
    results.loc[hit, "settings_mismatch"] = "threads: asked 2, ran 1"
    result = compare_to_baseline(RunData(run.run_id, results, run.samples), "tf-eigen")
    conv, gemm = by_agent(result, "conv2d"), by_agent(result, "gemm")
    other = conv["tf-mkl"]
    assert other.verdict == UNDECIDED and other.evidence == "other settings than asked"
    assert "3 of tf-mkl's 3 processes ran otherwise than asked (threads: asked 2, ran 1)" in (
        other.notes
    )
    assert "would answer another question" in other.notes and math.isnan(other.p_adjusted)
    assert gemm["tf-mkl"].verdict == EQUIVALENT and conv["tf-eigen#2"].verdict == EQUIVALENT


def _interfered(run: RunData, agent: str, workload: str, repetitions: list[int]) -> RunData:
    """`run` with `agent`'s `repetitions` of `workload` interfered (run/interference.py). Their
    samples are made 3x slower, as a hog would make them, so a comparison that used them would
    show it."""
    results, samples = run.results.copy(), run.samples.copy()
    hit = (results["agent"] == agent) & (results["workload"] == workload)
    hit &= results["repetition"].isin(repetitions)
    results["interfered"] = results["interfered"].astype("boolean")
    results.loc[(results["status"] == "ok") & results["interfered"].isna(), "interfered"] = False
    results.loc[hit, "interfered"] = True
    results.loc[hit, "interference"] = "other processes used 93% of the agent's 2 CPUs"
    slowed = samples["cell"].isin(results.loc[hit, "cell"])
    samples.loc[slowed, "seconds"] *= 3
    return RunData(run.run_id, results, samples, run.metadata)


def test_interfered_processes_are_left_out_and_a_side_of_only_those_is_never_called(
    run: RunData,
) -> None:
    """One of tf-mkl's three conv2d processes ran beside a hog: the verdict comes from the two
    clean ones (still 2.3x, not dragged down by the hog's 3x), and the note names the one left
    out. Every tf-eigen#2 gemm process interfered: nothing is called from them."""
    spoiled = _interfered(run, "tf-mkl", "conv2d", [1])
    spoiled = _interfered(spoiled, "tf-eigen#2", "gemm", [0, 1, 2])
    result = compare_to_baseline(spoiled, "tf-eigen")
    conv, gemm = by_agent(result, "conv2d"), by_agent(result, "gemm")
    left = conv["tf-mkl"]
    assert left.verdict == FASTER and left.speedup == pytest.approx(2.3, rel=0.05)
    assert left.repetitions == 2
    assert "1 of tf-mkl's 3 processes left out, interfered (other processes used 93%" in (
        left.notes
    )
    twin = gemm["tf-eigen#2"]
    assert twin.verdict == UNDECIDED and twin.evidence == "interfered processes"
    assert "every one of tf-eigen#2's 3 processes here was interfered" in twin.notes
    assert "--quiet-host" in twin.notes and math.isnan(twin.p_adjusted)
    assert twin.speedup == pytest.approx(1 / 3, rel=0.05)  # shown, from the interfered ones
    # An interfered A/A side measures the hog, not the noise: no floor is taken from it.
    assert all(m.key[0] != "gemm" for m in result.noise)
    assert gemm["tf-mkl"].verdict == EQUIVALENT


def test_a_run_without_samples_has_no_cells() -> None:
    """A run interrupted before its first sample: nothing to group, not an error (the end of
    `collector run` reads it for what the run found)."""
    empty = pd.DataFrame(
        {"cell": pd.Series([], dtype="int64"), "seconds": pd.Series([], dtype="float64")}
    )
    assert samples_by_cell(empty) == {}
