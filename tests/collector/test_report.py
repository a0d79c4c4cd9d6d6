"""`collector report`: the HTML page and Markdown summary of a synthetic run, opened in a real
headless browser (Debian's chromium; `make system-deps` installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from fwbench.collector.analysis.contenders import RunData, load_run
from fwbench.collector.analysis.report import figures as report_figures
from fwbench.collector.analysis.report import write_report
from fwbench.collector.analysis.report.data import cell_summary, environments, row_statistics
from fwbench.collector.store.database import ResultStore

from .conftest import synthetic_row

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Records, once the page has loaded, whether each image decoded and its natural size.
PROBE = """<script>
window.addEventListener("load", () => {
  const found = [...document.images].map(i => [i.id, i.complete, i.naturalWidth, i.naturalHeight]);
  document.body.setAttribute("data-images", JSON.stringify(found));
});
</script>"""


def reps(median: float, seed: int, count: int = 2, n: int = 40) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [median * rng.lognormal(0.0, 0.05, n) for _ in range(count)]


@pytest.fixture
def run(make_run: Callable[..., RunData], store: ResultStore) -> RunData:
    """Three agents (one an A/A twin), two workloads, two phases, two batch sizes; CPU and
    memory telemetry for two of them; one time-to-accuracy row; no GPU telemetry."""
    measurements = {
        agent: {
            (workload, phase, batch): reps(base * batch * factor, seed + batch)
            for workload, base in (("conv2d", 0.004), ("gemm", 0.06))
            for phase in ("train", "infer")
            for batch in (1, 8)
        }
        for agent, factor, seed in (
            ("tf-eigen", 1.0, 1),
            ("tf-mkl", 0.45, 2),
            ("tf-eigen#2", 1.0, 3),
        )
    }
    telemetry = {
        agent: {
            "cpu_user_percent": user,
            "cpu_system_percent": 12.0,
            "host_iowait_percent": 0.5,
            "rss_peak_bytes": 900e6,
            "rss_mean_bytes": 700e6,
        }
        for agent, user in (("tf-eigen", 180.0), ("tf-mkl", 150.0))
    }
    make_run("report-run", measurements, telemetry)
    history = [
        {"epoch": e, "train_seconds": 0.4, "eval_seconds": 0.01, "validation_accuracy": a}
        for e, a in enumerate((0.6, 0.85, 0.95, 0.975), start=1)
    ]
    accuracy = synthetic_row(
        "report-run",
        100,
        "tf-mkl",
        ("train_to_accuracy", "train", 32),
        0,
        kind="accuracy",
        target_accuracy=0.97,
        accuracy_history=json.dumps(history),
        reached_target=True,
    )
    store.add_result("report-run", accuracy, [400_000_000] * 3)
    return load_run(store, "report-run")


def test_cell_summary_pools_repetitions(run: RunData) -> None:
    summary = cell_summary(run)
    assert len(summary) == 3 * 8 + 1
    row = summary[(summary.agent == "tf-mkl") & (summary.workload == "gemm")].iloc[0]
    assert row.repetitions == 2 and row.n == 80
    assert row.ci_low_seconds < row.median_seconds < row.ci_high_seconds
    assert row.items_per_second == pytest.approx(row.batch_size / row.median_seconds)


def test_row_statistics_recomputed_from_samples(run: RunData) -> None:
    stats = row_statistics(run)
    assert len(stats) == 3 * 8 * 2 + 1
    assert {"p99_seconds", "outliers", "noisy", "median_ci_low_seconds"} <= set(stats.columns)
    assert stats["noisy"].sum() == 1  # the accuracy row: 3 samples


def test_environments_one_row_per_agent(run: RunData) -> None:
    table = environments(run)
    assert table["agent"].tolist() == ["tf-eigen", "tf-mkl", "tf-eigen#2"]
    assert "onednn 3.7" in table["libraries"].tolist()
    assert "image" not in table.columns  # no row has one


def test_report_writes_html_markdown_and_figures(run: RunData, tmp_path: Path) -> None:
    files = write_report(run, tmp_path / "report", baseline="tf-eigen")
    html = files.html.read_text()
    names = sorted(p.stem for p in files.figures)
    assert names == [
        "distributions",
        "latency",
        "relative_time",
        "resources",
        "throughput",
        "time_to_accuracy",
    ]
    embedded = re.findall(
        r'<img class="plot" id="fig-([a-z_]+)"[^>]*src="data:image/png;base64,', html
    )
    assert sorted(embedded) == names
    assert 'id="note-power_energy"' in html and "no GPU telemetry" in html
    assert not re.search(r'(src|href)="(https?:)?//', html), "external URL in the page"
    markdown = files.markdown.read_text()
    for name in names:
        assert f"](figures/{name}.png)" in markdown
    assert "_no GPU telemetry in this run (CPU agents)_" in markdown
    assert "| conv2d train bs=8 float32 | tf-mkl |" in markdown
    glance, every = markdown.split("### Every figure of every comparison")
    verdicts = re.findall(r"\| (faster|slower|equivalent|undecided) \|", glance)
    assert verdicts.count("faster") == 8  # tf-mkl in every cell, one line each
    assert len(verdicts) == 16
    assert len(re.findall(r"\| (faster|slower|equivalent|undecided) \|", every)) == 16


def test_report_without_telemetry_columns_notes_them(
    make_run: Callable[..., RunData], tmp_path: Path
) -> None:
    # A run of one agent and no telemetry: nothing to compare, no resources, still a page.
    run = make_run("plain", {"torch-cpu": {("gemm", "infer", 1): reps(0.01, 1)}})
    files = write_report(run, tmp_path / "plain")
    html = files.html.read_text()
    assert "nothing to compare: one agent in this run" in html
    assert "no CPU or memory telemetry in this run" in html
    assert "no accuracy workloads in this run" in html


def chromium(*args: str, page: Path, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={profile}",
            "--hide-scrollbars",
            *args,
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_report_renders_in_headless_chromium(run: RunData, tmp_path: Path) -> None:
    assert CHROMIUM is not None, "chromium not installed (make system-deps installs it)"
    files = write_report(run, tmp_path / "report", baseline="tf-eigen")
    probed = tmp_path / "probed.html"
    probed.write_text(files.html.read_text().replace("</body>", PROBE + "</body>"))
    dom = chromium("--dump-dom", page=probed, profile=tmp_path / "profile")
    found = re.search(r"data-images=\"([^\"]*)\"", dom.stdout)
    assert found, dom.stderr[-2000:]
    images = json.loads(found.group(1).replace("&quot;", '"'))
    assert len(images) == len(files.figures) == 6
    for image_id, complete, width, height in images:
        assert complete and width > 300 and height > 150, (image_id, width, height)

    screenshot = tmp_path / "page.png"
    shot = chromium(
        f"--screenshot={screenshot}",
        "--window-size=1280,2000",
        page=files.html,
        profile=tmp_path / "profile",
    )
    assert screenshot.is_file(), shot.stderr[-2000:]
    pixels = imread(screenshot)[..., :3]
    assert pixels.shape[:2] == (2000, 1280)
    assert pixels.std() > 0.05  # not blank
    assert (pixels.min(axis=2) < 0.9).mean() > 0.02  # some ink: text, bars, lines


@pytest.mark.parametrize(
    ("selection", "text"),
    [
        ({}, "1"),
        ({"repeat": 3, "fresh_process": True}, "3 (a fresh process per repetition)"),
        ({"repeat": 3, "fresh_process": False}, "3 (one process per agent)"),
        ({"repeat": 2}, "2 (one process per agent)"),  # runs from before fresh processes
    ],
)
def test_report_states_how_repetitions_ran(selection: dict, text: str) -> None:
    from fwbench.collector.analysis.report.page import _repetitions

    assert _repetitions({"selection": selection}) == text


def test_a_run_measured_until_decided_states_its_rounds_not_one_repetition() -> None:
    # Its selection says repeat 1 (the rounds were not fixed in advance); the page must not.
    from fwbench.collector.analysis.report.page import _repetitions

    metadata = {
        "selection": {"repeat": 1, "fresh_process": True},
        "until_decided": {"rounds": 9, "decisions": []},
    }
    said = _repetitions(metadata)
    assert said.startswith("until decided, 9 rounds") and said != "1"


def test_an_agents_modes_draw_lines_of_their_own_colour(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--modes function,xla` of one agent: two lines, two colours (both were the agent's)."""
    drawn: list[Figure] = []
    monkeypatch.setattr(report_figures, "png", lambda figure: drawn.append(figure) or b"")
    summary = pd.DataFrame(
        {
            "kind": "step",
            "workload": "generate",
            "phase": "infer",
            "agent": "tf-eigen",
            "label": ["tf-eigen (function)", "tf-eigen (xla)"],
            "batch_size": [1, 1],
            "median_seconds": [0.2, 0.13],
            "ci_low_seconds": [0.19, 0.12],
            "ci_high_seconds": [0.23, 0.14],
            "items_per_second": [5.0, 7.7],
        }
    )
    for what in ("latency", "throughput"):
        report_figures.versus_batch(summary, {"tf-eigen": "#1f77b4"}, what)
        (ax,) = drawn.pop().axes
        colours = [line.get_color() for line in ax.get_lines() if line.get_marker() == "o"]
        assert len(colours) == 2 and colours[0] != colours[1], colours
