"""A run of one agent has nothing to compare: `collector compare RUN --baseline AGENT` says so in
one line (exit 2, bad input) instead of an empty table, the report says so where its
comparisons would be, and the end of `collector run` proposes the report and the results
(and what would compare the agent), never `compare --baseline` with the agent itself."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.one_agent import NothingToCompare, next_steps
from fwbench.collector.analysis.report import write_report
from fwbench.collector.cli import app
from fwbench.collector.cli.common import ExitCode
from fwbench.collector.store.database import ResultStore

from .test_report import reps

sys.path.insert(0, str(Path(__file__).parents[1] / "conformance"))
from broken_agents import serve  # an agent keeping the protocol, served on a loopback port

GEMM, CONV = ("gemm", "infer", 1), ("conv2d", "infer", 1)


@pytest.fixture
def alone(make_run: Callable[..., RunData]) -> RunData:
    return make_run("alone", {"torch-cpu": {GEMM: reps(0.01, 1), CONV: reps(0.02, 2)}})


def test_compare_with_the_only_agent_says_there_is_nothing_to_compare(
    alone: RunData, store: ResultStore
) -> None:
    with pytest.raises(NothingToCompare):
        compare_to_baseline(alone, "torch-cpu")
    for extra in ([], ["--format", "json"]):
        done = CliRunner().invoke(
            app, ["compare", "alone", "--baseline", "torch-cpu", *extra, "--store", str(store.path)]
        )
        assert done.exit_code == ExitCode.NOT_STARTED, done.output
        (line,) = done.output.strip().splitlines()  # one line, no empty table
        assert line.startswith("error: nothing to compare against: torch-cpu is the only agent")
        assert "collector results alone" in line and "--agents torch-cpu,OTHER" in line
    # An unknown baseline is still named as such.
    other = CliRunner().invoke(
        app, ["compare", "alone", "--baseline", "tf-mkl", "--store", str(store.path)]
    )
    assert other.exit_code == ExitCode.NOT_STARTED and "has no measured cells" in other.output


def test_one_agent_in_two_modes_still_compares_its_modes(
    make_run: Callable[..., RunData],
) -> None:
    run = make_run(
        "modes",
        {"jax-cpu": {GEMM: reps(0.01, 1)}, "jax-cpu ": {GEMM: reps(0.02, 2)}},
        extra_columns={"jax-cpu ": {"mode": "eager"}},
    )
    # The fixture keys rows by agent: the second agent's rows become the first's other mode.
    run.results.loc[run.results["mode"] == "eager", "agent"] = "jax-cpu"
    (only,) = compare_to_baseline(run, "jax-cpu").comparisons
    assert (only.agent, only.mode, only.baseline_mode) == ("jax-cpu", "eager", "function")
    assert "--baseline jax-cpu" in next_steps(run.results, "out", None)


def test_the_report_of_one_agent_proposes_no_comparison(alone: RunData, tmp_path: Path) -> None:
    files = write_report(alone, tmp_path / "report")
    html, markdown = files.html.read_text(), files.markdown.read_text()
    said = "Nothing to compare: torch-cpu is the only agent in this run; to compare it, run it"
    assert 'id="nothing-to-compare"' in html and said in html and said in markdown
    for text in (html, markdown):
        assert "Comparison with" not in text and "every agent against" not in text
        assert "Nothing decided" not in text
    assert "## What run alone found\n" in markdown
    assert (tmp_path / "report" / "figures" / "latency.png").is_file()  # the rest is drawn


def test_the_next_hint_of_one_agent_is_no_self_comparison(
    alone: RunData, make_run: Callable[..., RunData]
) -> None:
    hint = next_steps(alone.results, "runs/alone", None)
    assert hint.startswith("next: collector report runs/alone  |  collector results runs/alone")
    assert "collector compare" not in hint and "--aa torch-cpu" in hint
    two = make_run("two", {"tf-mkl": {GEMM: reps(0.01, 1)}, "tf-eigen": {GEMM: reps(0.02, 2)}})
    assert next_steps(two.results, "runs/two", None) == (
        "next: collector report runs/two  |  collector compare runs/two --baseline tf-mkl"
    )
    assert next_steps(two.results, "runs/two", "tf-eigen").endswith("--baseline tf-eigen")
    # An A/A pair is two agents: its noise floor is a comparison.
    pair = make_run("pair", {"tf-mkl": {GEMM: reps(0.01, 1)}, "tf-mkl#2": {GEMM: reps(0.01, 2)}})
    assert "compare runs/pair --baseline tf-mkl" in next_steps(pair.results, "runs/pair", None)
    assert "\n" not in hint


def test_another_agent_whose_every_process_failed_is_still_said_by_compare(
    make_run: Callable[..., RunData],
) -> None:
    """Two agents ran, one failed everywhere: not "the only agent"; `compare` names the
    failures ("not compared: ..."), as the hint proposes."""
    failed = {"status": "failed", "error_code": "PROTOCOL_VIOLATION", "error": "it lied"}
    run = make_run(
        "failing",
        {"honest": {GEMM: reps(0.01, 1)}, "liar": {GEMM: reps(0.01, 2)}},
        extra_columns={"liar": failed},
    )
    result = compare_to_baseline(run, "honest")
    assert not result.comparisons and "every process failed" in result.skipped[0]
    assert "collector compare out --baseline honest" in next_steps(run.results, "out", None)


def test_a_real_run_of_one_agent_ends_proposing_its_report_and_results(tmp_path: Path) -> None:
    """`collector run` of one agent (attached, served here) ends with a `next:` line of the
    report and the results; `compare` of it, with itself as --baseline or none, says there is
    nothing to compare."""
    server, _, port = serve("honest")
    env = {**os.environ, "FWBENCH_CALIBRATION": "off", "COLUMNS": "200"}

    def collector(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "fwbench.collector.cli", *args]
        command += ["--store", str(tmp_path / "store.sqlite")]
        return subprocess.run(
            command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
        )

    try:
        out = tmp_path / "run"
        done = collector(
            "run",
            f"--agents=fake-cpu@127.0.0.1:{port}",
            "--workloads=gemm",
            "--phases=infer",
            "--batch-sizes=1",
            "--iterations=12",
            "--max-iterations=20",
            "--out",
            str(out),
        )
    finally:
        server.stop(0)
    assert done.returncode == 0, done.stderr
    (hint,) = [line for line in done.stdout.splitlines() if line.startswith("next:")]
    assert hint.startswith(f"next: collector report {out}  |  collector results {out}  ")
    assert "collector compare" not in hint and "--agents fake-cpu,OTHER" in hint
    for baseline in (["--baseline", "fake-cpu"], []):  # the one agent is the baseline anyway
        compared = collector("compare", str(out), *baseline)
        assert compared.returncode == ExitCode.NOT_STARTED and not compared.stdout
        assert compared.stderr.startswith("error: nothing to compare against: fake-cpu is the")
