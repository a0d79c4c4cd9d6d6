"""The report's section on the user's model file (analysis/report/model_outputs.py): every
inference row of the model with the file it ran (the user's, or an export and its maker) and
its outputs against the reference's, a row whose outputs differ marked; nothing for a run
without a model. Rows stored with synthetic figures: what is checked is the tool."""

from __future__ import annotations

from pathlib import Path

from fwbench.collector.analysis.contenders import load_run
from fwbench.collector.analysis.report import write_report
from fwbench.collector.analysis.report.model_outputs import model_section
from fwbench.collector.store import ResultStore

from .conftest import synthetic_row

MODEL = "model:net@1234abcd"
ROWS = (  # agent, format, made by, match, largest difference, note
    ("keras-tf", "keras", None, True, 0.0, None),
    ("onnxruntime-cpu", "onnx", "keras-tf: tf2onnx 1.17.0", True, 3.6e-7, None),
    ("openvino-cpu", "onnx", "keras-tf: tf2onnx 1.17.0", False, 0.5, "y: 3 of 8 elements beyond"),
)


def _store(store: ResultStore, workload: str = MODEL) -> None:
    store.start_run("m", Path("/tmp/m"), "2026-12-07T00:00:00+00:00", {"run_id": "m"})
    for cell, (agent, fmt, made, match, worst, note) in enumerate(ROWS):
        model = {
            "model_format": fmt,
            "model_sha256": "ab" * 32,
            "model_export": made,
            "outputs_reference": "keras-tf",
            "outputs_match": match,
            "output_max_abs_diff": worst,
            "output_max_rel_diff": worst,
            "outputs_note": note,
        }
        row = synthetic_row("m", cell, agent, (workload, "infer", 1), 0, **model)
        store.add_result("m", row, [1_000_000 * (cell + 1)] * 5)


def test_every_model_row_says_its_file_and_how_far_its_outputs_are(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "store.sqlite")
    _store(store)
    section = model_section(load_run(store, "m"))
    assert section is not None and section["differ"] == 1
    rows = {row[1].split()[0]: row for row in section["rows"]}
    assert rows["keras-tf"][3:6] == ["keras", "-", "same"]
    assert rows["onnxruntime-cpu"][4:7] == ["keras-tf: tf2onnx 1.17.0", "same", "3.6e-07"]
    assert rows["openvino-cpu"][5] == "DIFFER" and "3 of 8" in rows["openvino-cpu"][8]
    assert "against keras-tf's for the same inputs" in section["caption"]
    files = write_report(load_run(store, "m"), tmp_path / "report", baseline="keras-tf")
    page, text = files.html.read_text(), files.markdown.read_text()
    assert 'id="model-outputs"' in page and "Your model: same outputs?" in text
    assert "DIFFER" in page and "keras-tf: tf2onnx 1.17.0" in text


def test_a_run_without_a_model_file_has_no_such_section(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "store.sqlite")
    _store(store, workload="gemm")
    assert model_section(load_run(store, "m")) is None
    files = write_report(load_run(store, "m"), tmp_path / "report", baseline="keras-tf")
    assert "model-outputs" not in files.html.read_text()
