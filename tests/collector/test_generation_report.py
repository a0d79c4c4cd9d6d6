"""The report's generation plots (analysis/report/generation.py): drawn from the generation
rows of a run, a panel per model shape, the time-to-first-token plot only where a shape was
measured at several prompt lengths; a note instead of an image where there is nothing to
draw. Rows stored with synthetic figures, so what is checked is the tool, not a CPU."""

from __future__ import annotations

import json
from pathlib import Path

from fwbench.collector.analysis.contenders import load_run
from fwbench.collector.analysis.report import write_report
from fwbench.collector.analysis.report.generation import generation_plots, generation_rows
from fwbench.collector.store import ResultStore

from .conftest import synthetic_row

SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "context": 256, "new_tokens": 8}


def _store_generation_run(store: ResultStore, prompts: tuple[int, ...], fraction: bool) -> None:
    store.start_run("gen", Path("/tmp/gen"), "2026-11-28T00:00:00+00:00", {"run_id": "gen"})
    cell = 0
    for agent, speed in (("torch-cpu", 1.0), ("jax-cpu", 1.5)):
        for prompt in prompts:
            for batch in (1, 4):
                decode = 1e-3 * speed * (1 + batch / 8)
                row = synthetic_row(
                    "gen",
                    cell,
                    agent,
                    ("generate", "infer", batch),
                    0,
                    kind="generation",
                    mode="eager",
                    params=json.dumps({**SHAPE, "prompt_len": prompt}),
                    prompt_tokens=prompt,
                    decode_steps=7,
                    time_to_first_token_seconds=prompt * 1e-4 * speed,
                    decode_tokens_per_second=batch / decode,
                    decode_bandwidth_fraction=0.3 / speed if fraction else None,
                )
                store.add_result("gen", row, [int(1e9 * (prompt * 1e-4 + 7 * decode))] * 3)
                cell += 1


def test_each_plot_is_drawn_from_the_generation_rows(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "store.sqlite")
    _store_generation_run(store, (16, 64), fraction=True)
    run = load_run(store, "gen")
    rows = generation_rows(run)
    assert len(rows) == 8 and set(rows["label"]) == {"torch-cpu", "jax-cpu"}
    assert rows["shape"].nunique() == 2  # the two prompt lengths are two shapes ...
    assert rows["others"].nunique() == 1  # ... of one model
    plots = generation_plots(run, {"torch-cpu": "#1f77b4", "jax-cpu": "#ff7f0e"})
    assert [p.name for p in plots] == ["decode_tokens", "time_to_first_token", "decode_bandwidth"]
    assert all(p.png and p.png.startswith(b"\x89PNG") and not p.note for p in plots)
    files = write_report(run, tmp_path / "report", baseline="torch-cpu")
    page = files.html.read_text()
    for plot in plots:
        assert plot.title in page
    # The swept parameter names each cell of the comparisons: two prompts, two rows.
    markdown = files.markdown.read_text()
    for prompt in (16, 64):
        assert f"| generate infer bs=4 float32 prompt_len={prompt} | jax-cpu |" in markdown


def test_a_plot_without_data_says_why(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "store.sqlite")
    _store_generation_run(store, (16,), fraction=False)
    notes = {p.name: p.note for p in generation_plots(load_run(store, "gen"), {})}
    assert notes["decode_tokens"] == ""
    assert "--param prompt_len=A,B" in notes["time_to_first_token"]
    assert "no row has a calibrated bandwidth" in notes["decode_bandwidth"]
    empty = ResultStore(tmp_path / "empty.sqlite")
    empty.start_run("none", tmp_path, "2026-11-28T00:00:00+00:00", {"run_id": "none"})
    assert all(
        "no generation cells" in p.note for p in generation_plots(load_run(empty, "none"), {})
    )
