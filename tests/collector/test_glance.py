"""Comparisons at a glance (analysis/answers/glance.py): a run of 12 comparisons measured until
decided, as `collector compare` prints it at 80 and 120 columns (one line each, no name or
figure cut, each reason said once under the table, in at most 40 lines), as the Markdown
report writes it, and as headless chromium lays out the HTML report at 1400 px (no row taller
than three lines). --verbose keeps every figure and every row's notes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from fwbench.collector.analysis.answers.glance import (
    UNBOUNDED,
    UNBOUNDED_NOTE,
    general,
    interval_text,
)
from fwbench.collector.analysis.contenders import RunData, load_run
from fwbench.collector.analysis.report import write_report
from fwbench.collector.cli import app
from fwbench.collector.stats.significance import EQUIVALENT, SLOWER, UNDECIDED
from fwbench.collector.store import ResultStore

from .test_report import CHROMIUM, chromium

PARAMS = json.dumps({"m": 8})  # conftest.synthetic_row's
CELLS = [(w, p, 8) for w in ("conv2d", "gemm") for p in ("train", "infer")]
AGENTS = {"tf-mkl": 1.0, "tf-eigen": 1.4, "torch-cpu": 1.02, "onnxruntime-openvino-cpu": 0.97}
STOPPED = "budget: the next round would likely take 21 s, 12 s left"
INTERFERED = (
    "3 interfered processes were left out and measured again (last: tf-mkl's process in "
    "round 5: other processes used 95% of the agent's 2 CPUs)"
)
MARGIN = "by default: this host's earlier runs did not measure how far apart {}'s processes lie"


def _decision(cell: tuple[str, str, int], agent: str, index: int) -> dict[str, Any]:
    """Slower, equivalent or undecided by agent; the last cell's undecided ones have an
    interval from too few processes to bound anything."""
    workload, phase, batch = cell
    verdict = {"tf-eigen": SLOWER, "torch-cpu": EQUIVALENT}.get(agent, UNDECIDED)
    speedup = {"tf-eigen": 0.72, "torch-cpu": 0.98}.get(agent, 1.03)
    low, high = (0.002, 309.334) if (index, verdict) == (3, UNDECIDED) else (0.95, 1.1)
    low, high = (low, high) if low < 0.01 else (low * speedup, high * speedup)
    why = f"{STOPPED}; about {6 + index} processes a side would likely decide it; {INTERFERED}"
    return {
        "key": [workload, phase, batch, "float32", 0, PARAMS, ""],
        "cell": f"{workload} {phase} bs={batch} float32",
        **{"agent": agent, "mode": "", "against": "tf-mkl", "against_mode": ""},
        **{"verdict": verdict, "speedup": speedup, "ci_low": low},
        **{"ci_high": high, "level": 0.999, "looks": 5, "spent": 0.4},
        **{"repetitions": 6, "spread": 0.05, "margin": 0.05},
        "margin_from": MARGIN.format(f"{agent} and tf-mkl"),
        "why": why if verdict == UNDECIDED else "",
        **{"arithmetic": "", "kernel": ""},
    }


@pytest.fixture
def twelve(make_run: Callable[..., RunData], store: ResultStore) -> RunData:
    rng = np.random.default_rng(7)
    make_run(
        "twelve",
        {
            agent: {
                cell: [0.01 * f * rng.lognormal(0, 0.01, 30) for _ in range(6)] for cell in CELLS
            }
            for agent, f in AGENTS.items()
        },
    )
    decisions = [
        _decision(cell, agent, index)
        for index, cell in enumerate(CELLS)
        for agent in list(AGENTS)[1:]
    ]
    record = {
        **{"baseline": "tf-mkl", "floor": 0.03, "margin": None, "budget_seconds": 300.0},
        **{"max_rounds": 100, "rounds": 6, "seconds": 290.0, "round_seconds": [48.0] * 6},
        **{"stopped": STOPPED, "method": "Yuen's t", "decisions": decisions},
    }
    store.finish_run(
        "twelve",
        "ok",
        "2026-01-01T00:06:00+00:00",
        {"run_id": "twelve", "command": "collector run --until-decided", "until_decided": record},
    )
    return load_run(store, "twelve")


def _compare(store: ResultStore, columns: int, *extra: str) -> str:
    command = ["compare", "twelve", "--baseline", "tf-mkl", "--store", str(store.path), *extra]
    done = CliRunner().invoke(app, command, env={"COLUMNS": str(columns)})
    assert done.exit_code == 0, done.output
    return done.output


@pytest.mark.parametrize("columns", [80, 120])
def test_twelve_comparisons_fit_in_40_lines_with_nothing_cut(
    twelve: RunData, store: ResultStore, columns: int
) -> None:
    shown = _compare(store, columns)
    lines = shown.splitlines()
    assert len(lines) <= 40, shown
    assert "…" not in shown, shown  # Rich's mark of a cut cell
    rows = [line for line in lines if re.search(r"\d\.\d{3}x", line)]
    assert len(rows) == 12, shown
    assert all(len(row) <= columns for row in rows), rows
    for agent in list(AGENTS)[1:]:  # every name whole, on its own rows
        assert sum(bool(re.search(rf"\b{re.escape(agent)}\s", row)) for row in rows) == 4, shown
    assert shown.count(STOPPED) == 1  # said once, as a numbered note
    assert shown.count("interfered processes were left out and measured again") == 1
    assert "309.334" not in shown and f"] {UNBOUNDED}" not in shown
    assert sum(UNBOUNDED in row for row in rows) == 1 and shown.count(UNBOUNDED_NOTE) == 1
    marks = [row.split()[-1] for row in rows if "undecided" in row]
    assert (
        len(marks) == 4 and len(set(marks)) >= 1 and all(re.fullmatch(r"[\d,]+", m) for m in marks)
    )


def test_verbose_keeps_every_figure_and_note(twelve: RunData, store: ResultStore) -> None:
    shown = _compare(store, 250, "--verbose")
    assert "309.334" in shown and "p (Holm)" in shown and "baseline ms" in shown
    assert "round 5: other processes used 95%" in shown  # each row's own figures


def test_the_markdown_report_shows_one_line_a_comparison(twelve: RunData, tmp_path: Path) -> None:
    page = write_report(twelve, tmp_path / "report").markdown.read_text()
    glance = page.split("## Comparison with tf-mkl")[1].split("### Every figure")[0]
    rows = [line for line in glance.splitlines() if re.search(r"\d\.\d{3}x", line)]
    assert len(rows) == 12 and glance.count(STOPPED) == 1, glance
    assert sum("| conv2d train bs=8 |" in row for row in rows) == 1  # the cell named once


def test_no_html_row_is_taller_than_three_lines(twelve: RunData, tmp_path: Path) -> None:
    assert CHROMIUM is not None, "chromium not installed (make system-deps installs it)"
    files = write_report(twelve, tmp_path / "report")
    probe = """<script>
window.addEventListener("load", () => {
  const rows = [...document.querySelectorAll("#glance tr")];
  const heights = rows.map(r => r.getBoundingClientRect().height);
  document.body.setAttribute("data-rows", JSON.stringify(heights));
});
</script>"""
    probed = tmp_path / "probed.html"
    probed.write_text(files.html.read_text().replace("</body>", probe + "</body>"))
    dom = chromium("--dump-dom", "--window-size=1400,2000", page=probed, profile=tmp_path / "p")
    found = re.search(r"data-rows=\"([^\"]*)\"", dom.stdout)
    assert found, dom.stderr[-2000:]
    heights = json.loads(found.group(1).replace("&quot;", '"'))
    assert len(heights) == 13  # the header and 12 comparisons
    assert max(heights) <= 3 * min(heights), heights  # the shortest is one line of text


def test_a_reason_in_general_words_and_an_interval_in_words() -> None:
    assert general(INTERFERED).startswith("interfered processes were left out")
    assert general(STOPPED) == STOPPED
    assert "these agents' processes" in general(MARGIN.format("a and b") + " in this cell")
    assert interval_text(0.002, 309.3) == UNBOUNDED and interval_text(0.0, 1.2) == UNBOUNDED
    assert interval_text(1e-6, 1e6) == UNBOUNDED  # the [0.000, 1000000.000] of #55
    assert interval_text(0.9, 1.1) == "[0.900, 1.100]"
    assert interval_text(None, None) != UNBOUNDED


def test_a_decision_no_comparison_covers_has_its_own_line(
    make_run: Callable[..., RunData], store: ResultStore
) -> None:
    """b's only process in gemm infer bs=8 failed: no comparison of that cell, but the run's
    decision there (undecided, and why) is one of its answers, so it has a line."""
    rng = np.random.default_rng(3)
    cell = CELLS[0]
    make_run(
        "lost",
        {a: {cell: [0.01 * f * rng.lognormal(0, 0.01, 30)]} for a, f in (("a", 1), ("b", 2))},
    )
    failed = "b's process in round 1 failed (INTERNAL: boom): it cannot stand for the others"
    decisions = [
        {**_decision(cell, "b", 0), "against": "a", "verdict": SLOWER, "why": ""},
        {**_decision(("gemm", "infer", 8), "b", 0), "against": "a", "speedup": None}
        | {"ci_low": None, "ci_high": None, "why": failed},
    ]
    record = {"baseline": "a", "floor": 0.03, "margin": None, "budget_seconds": 60.0}
    record |= {"rounds": 1, "seconds": 9.0, "stopped": STOPPED, "decisions": decisions}
    store.finish_run(
        "lost", "ok", "2026-01-01T00:01:00+00:00", {"run_id": "lost", "until_decided": record}
    )
    command = ["compare", "lost", "--baseline", "a", "--store", str(store.path)]
    shown = CliRunner().invoke(app, command, env={"COLUMNS": "120"}).output
    lines = shown.splitlines()
    assert any(
        re.match(r"gemm infer bs=8\s+b\s+-\s+none \(no look\)\s+undecided\s+\d", x) for x in lines
    ), shown
    assert "b's process in round 1 failed (INTERNAL: boom)" in shown
