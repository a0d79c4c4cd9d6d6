"""The run's table (`collector run`, `collector results RUN`) says why every cell that did not
measure did not, in full under the table however narrow the terminal, and shows the strategy
of a run's worlds in a column of its own (issue 39: unsupported cells read `unsupp…`, and
a world's strategy was nowhere in the table). Names and figures are never cut short: where the
table cannot be drawn whole, telemetry columns are left out, and said (issue 35's command
showed keras-torch, keras-jax and keras-tf each as `keras…`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from rich.console import Console

from fwbench.collector.run.run_table import summary_table
from fwbench.collector.store.reasons import MOST_LINES, reason_lines


def _row(agent: str, status: str = "ok", **extra: Any) -> dict[str, Any]:
    measured = status == "ok"
    return {
        "agent": agent,
        "workload": "lenet",
        "phase": "train",
        "batch_size": 8,
        "dtype": "float32",
        "mode": "eager",
        "intra_op_threads": 1,
        "median_seconds": 0.01 if measured else None,
        "cv": 0.02 if measured else None,
        "items_per_second": 800.0 if measured else None,
        "gflops_per_second": 1.0 if measured else None,
        "first_iteration_seconds": 0.05 if measured else None,
        "status": status,
        "error_code": None if measured else "UNIMPLEMENTED",
        "error": None,
        **extra,
    }


def _shown(results: pd.DataFrame, width: int = 80) -> str:
    console = Console(width=width, record=True, force_terminal=False)
    console.print(summary_table(results, "run r1"))
    return console.export_text()


def test_an_unsupported_cells_reason_is_read_in_full_under_a_narrow_table() -> None:
    why = "torch-cpu does not offer pipeline parallelism for lenet: it has 2 stages, not 4"
    results = pd.DataFrame(
        [
            _row("torch-cpu~w2", strategy="ddp"),
            _row("torch-cpu~w2", "unsupported", strategy="pipeline", error=why),
            _row("tf-eigen~w2", "failed", strategy="mirrored", error_code="INTERNAL"),
        ]
    )
    text = " ".join(_shown(results).split())  # the caption wraps at 80 columns
    assert f"unsupported: torch-cpu~w2 lenet train bs=8 eager pipeline: {why}" in text
    assert "failed: tf-eigen~w2 lenet train bs=8 eager mirrored: INTERNAL" in text
    wide = _shown(results, width=250)
    header = next(line for line in wide.splitlines() if "workload" in line)
    assert "strategy" in header  # a column of its own, between mode and threads
    assert header.index("mode") < header.index("strategy") < header.index("thr")


def test_names_and_figures_are_never_cut_and_left_out_columns_are_named() -> None:
    telemetry = {
        "cpu_user_percent": 190.0,
        "cpu_system_percent": 3.0,
        "host_iowait_percent": 0.0,
        "others_cpu_percent": 2.0,
        "interfered": False,
        "rss_peak_bytes": 600 * 2**20,
        "peak_fraction": 0.25,
    }
    agents = [
        "torch-cpu",
        "keras-torch",
        "jax-cpu",
        "keras-jax",
        "tf-eigen",
        "keras-tf",
        "onnxruntime-cpu",
        "openvino-cpu",
        "paddle-cpu",
    ]
    results = pd.DataFrame(
        [_row(agent, items_per_second=25_825.4, **telemetry) for agent in agents]
    )
    results["workload"] = "mobilenet_v2"
    text = _shown(results, 160)
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 160
    body = [line.split("│")[1:3] for line in text.splitlines() if line.startswith("│")]
    assert [(a.strip(), w.strip()) for a, w in body] == [(a, "mobilenet_v2") for a in agents]
    assert all("25,825.4" in line for line in text.splitlines() if line.startswith("│"))
    assert "left out at this width (160 columns): others %, iowait %, usr/sys %;" in text
    # Too narrow for the table's names and figures whole: a line a cell, nothing cut.
    narrow = _shown(results, 80)
    assert "…" not in narrow and "│" not in narrow
    lines = " ".join(narrow.split())
    for agent in agents:
        said = f"{agent} mobilenet_v2 train bs=8 float32 eager: ok; median 10.00 ms, CV 2.0%"
        assert f"{said}, items/s 25,825.4" in lines
    wide = _shown(results, 250)
    assert "left out" not in wide and "others" in wide and "600 MiB" in wide


def test_no_strategy_column_without_worlds_and_no_caption_when_all_measured() -> None:
    text = _shown(pd.DataFrame([_row("torch-cpu"), _row("jax-cpu")]), width=200)
    assert "strategy" not in text and "unsupported:" not in text


def test_many_reasons_end_with_how_many_more_and_where() -> None:
    rows = [_row(f"a{i}", "unsupported", error=f"reason {i}") for i in range(MOST_LINES + 3)]
    lines = reason_lines(rows, "r1")
    assert len(lines) == MOST_LINES + 1 and lines[0].endswith(": reason 0")
    assert lines[-1] == "... and 3 more: collector results r1 --json"


def test_the_report_lists_the_cells_not_measured_with_their_reasons(
    make_run: Any, store: Any, tmp_path: Any
) -> None:
    from fwbench.collector.analysis.contenders import load_run
    from fwbench.collector.analysis.report import write_report

    key = ("gemm", "infer", 8)
    rng = np.random.default_rng(0)
    make_run(
        "r2",
        {
            "a": {key: [0.01 * rng.lognormal(0, 0.01, 20)]},
            "b": {key: [0.02 * rng.lognormal(0, 0.01, 20)]},
        },
    )
    why = "b cannot run gemm in float64 here"
    measured = store.results("r2").to_dict("records")[1]  # b's row: every column, as stored
    measured = {k: v for k, v in measured.items() if v is not pd.NaT}
    row = {**measured, "cell": 2, "phase": "train", "status": "unsupported", "error": why}
    store.add_result("r2", row, [])
    files = write_report(load_run(store, "r2"), tmp_path / "report", "a")
    page = files.markdown.read_text()
    assert "## Cells not measured" in page
    assert f"- unsupported: b gemm train bs=8 function: {why}" in page
    assert f"unsupported: b gemm train bs=8 function: {why}" in files.html.read_text()
