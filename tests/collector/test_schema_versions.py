"""Runs stored under schema 1 and 2 still load, compare and report under schema 6: the
columns added later are empty (NA), never an error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fwbench.collector.analysis.compare import compare_to_baseline
from fwbench.collector.analysis.contenders import load_run
from fwbench.collector.analysis.report import write_report
from fwbench.collector.store.database import ResultStore
from fwbench.collector.store.schema import COLUMN_NAMES, SCHEMA_VERSION

# Columns each older version wrote (what an old collector put in row_json).
V1_COLUMNS = [
    "schema_version",
    "run_id",
    "cell",
    "launcher",
    "agent",
    "address",
    "framework",
    "framework_version",
    "variant",
    "plugin_version",
    "libraries",
    "environment",
    "device",
    "device_name",
    "host",
    "cpu_model",
    "usable_cores",
    "in_container",
    "workload",
    "kind",
    "phase",
    "batch_size",
    "dtype",
    "mode",
    "layout",
    "intra_op_threads",
    "inter_op_threads",
    "threads_requested",
    "params",
    "seed",
    "n",
    "median_seconds",
    "mean_seconds",
    "stdev_seconds",
    "min_seconds",
    "max_seconds",
    "p5_seconds",
    "p95_seconds",
    "cv",
    "items_per_second",
    "flops_per_item",
    "gflops_per_second",
    "first_iteration_seconds",
    "build_seconds",
    "warmup_iterations",
    "measure_started_at",
    "measure_ended_at",
    "status",
    "error_code",
    "error",
]
V2_ADDED = [
    "settings",
    "items_per_sample",
    "target_accuracy",
    "reached_target",
    "time_to_target_seconds",
    "epochs_to_target",
    "epochs",
    "final_accuracy",
    "accuracy_history",
]
# Added in 3, and agent_pid in 4.
ADDED_LATER = (
    "world_size",
    "local_devices",
    "rank_samples_ns",
    "busbw_bytes_per_second",
    "repetition",
    "median_ci_low_seconds",
    "p99_seconds",
    "outliers",
    "noisy",
    "agent_pid",
    "settings_mismatch",
    "environment_source",
    "agent_python",
    "arithmetic_intensity",
    "peak_flops_per_second",
    "peak_fraction",
    "bandwidth_bytes_per_second",
    "calibration_id",
    "time_to_first_token_seconds",
    "decode_bandwidth_fraction",
    "decode_step_samples_ns",
    "others_cpu_percent",
    "interfered",
    "profile_classes",
    "profile_note",
)


def old_row(version: int, cell: int, agent: str, samples: np.ndarray) -> dict[str, Any]:
    values: dict[str, Any] = {
        "schema_version": version,
        "run_id": f"v{version}",
        "cell": cell,
        "launcher": "local",
        "agent": agent,
        "framework": "tensorflow",
        "libraries": json.dumps({"onednn": "3.7"}),
        "workload": "conv2d",
        "kind": "op",
        "phase": "train",
        "batch_size": 8,
        "dtype": "float32",
        "mode": "function",
        "threads_requested": 0,
        "params": "{}",
        "n": samples.size,
        "median_seconds": float(np.median(samples)),
        "cv": 0.05,
        "measure_started_at": "2025-01-01T00:00:00+00:00",
        "status": "ok",
        "settings": "{}",
        "items_per_sample": 8,
    }
    allowed = V1_COLUMNS + (V2_ADDED if version >= 2 else [])
    return {k: v for k, v in values.items() if k in allowed}


@pytest.fixture
def old_store(tmp_path: Path) -> ResultStore:
    db = ResultStore(tmp_path / "old.sqlite")
    rng = np.random.default_rng(0)
    for version in (1, 2):
        run_id = f"v{version}"
        db.start_run(run_id, tmp_path / run_id, "2025-01-01T00:00:00+00:00", {"run_id": run_id})
        for cell, (agent, median) in enumerate((("tf-eigen", 0.08), ("tf-mkl", 0.035))):
            samples = median * rng.lognormal(0, 0.03, 40)
            ns = np.round(samples * 1e9).astype(np.int64).tolist()
            db.add_result(run_id, old_row(version, cell, agent, samples), ns)
    return db


def test_schema_version_is_15() -> None:
    assert SCHEMA_VERSION == 15


@pytest.mark.parametrize("version", [1, 2])
def test_old_run_loads_with_new_columns_empty(old_store: ResultStore, version: int) -> None:
    frame = old_store.results(f"v{version}")
    assert tuple(frame.columns) == COLUMN_NAMES
    assert frame["schema_version"].tolist() == [version, version]
    for column in ADDED_LATER:
        assert frame[column].isna().all(), column
    assert frame["items_per_sample"].isna().all() == (version == 1)
    assert frame["median_seconds"].notna().all()


@pytest.mark.parametrize("version", [1, 2])
def test_old_run_compares_and_reports(old_store: ResultStore, version: int, tmp_path: Path) -> None:
    run = load_run(old_store, f"v{version}")
    result = compare_to_baseline(run, "tf-eigen")
    (mkl,) = result.comparisons
    # One process a side, no A/A pair: the samples say 2.3x, the evidence decides nothing.
    assert mkl.verdict == "undecided" and mkl.evidence == "one process"
    assert mkl.speedup == pytest.approx(0.08 / 0.035, rel=0.05)
    files = write_report(run, tmp_path / f"report{version}")
    html = files.html.read_text()
    assert "tf-mkl" in html and len(files.figures) >= 3
