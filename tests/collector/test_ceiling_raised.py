"""The calibrated ceiling is an upper bound (docs/calibration.md): a row that achieved more
FLOP/s than its ceiling raises it (recorded with the row that did, in the run's metadata and
this host's cached calibration), and every row of the run gets its fraction again, so none is
above 1. The tests fake a low calibration in the cache, so they decide which rows are faster
than it; the fake agent's steps sleep. A resumed run keeps the calibration it started with."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fwbench.collector.calibration.cache import (
    FORMAT_VERSION,
    cache_path,
    fingerprint_id,
    host_fingerprint,
)
from fwbench.collector.calibration.ceiling import merge_observed, observe, peak_flops
from fwbench.collector.store.database import ResultStore

sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent
from fake_agent import write_fake_agents

pytestmark = pytest.mark.timing  # which rows pass the ceiling comes from measured times

COLLECTOR = Path(sys.executable).with_name("collector")


def fake_calibration(calibration_id: str, peak: float) -> dict[str, Any]:
    """A quick calibration of this host with `peak` FLOP/s at 1 thread (twice at 2)."""
    fingerprint = host_fingerprint()
    return {
        "format": FORMAT_VERSION,
        "id": calibration_id,
        "fingerprint": fingerprint,
        "fingerprint_id": fingerprint_id(fingerprint),
        "measured_at": "2026-01-01T00:00:00+00:00",
        "effort": "quick",
        "peak_flops": {
            dtype: {
                "1": {"flops_per_second": peak, "library": "fake", "size": 1},
                "2": {"flops_per_second": 2 * peak, "library": "fake", "size": 1},
            }
            for dtype in ("float32", "float64")
        },
        "bandwidth": {
            str(threads): {"bytes_per_second": threads * 1e10, "library": "fake", "array_bytes": 0}
            for threads in (1, 2)
        },
        "method": {"thread_counts": [1, 2]},
    }


def cache(root: Path, calibration: dict[str, Any]) -> Path:
    path = cache_path(calibration["fingerprint"], "quick")
    path = root / "calibration" / path.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(calibration))
    return path


def collector(root: Path, *args: str) -> list[str]:
    return [str(COLLECTOR), *args, "--store", str(root / "store.sqlite")]


def environment(root: Path) -> dict[str, str]:
    return {
        **os.environ,
        "FWBENCH_CALIBRATION": "quick",
        "FWBENCH_CALIBRATION_DIR": str(root / "calibration"),
    }


def run_arguments(manifests: Path, out: Path, batch_sizes: str, micros: int) -> list[str]:
    return [
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "steady",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        batch_sizes,
        "--param",
        f"m={micros}",
        "--min-seconds",
        "0.1",
        "--out",
        str(out),
    ]


def row(gflops: float, threads: int, cell: int = 0, **more: Any) -> dict[str, Any]:
    return {
        "dtype": "float32",
        "intra_op_threads": threads,
        "gflops_per_second": gflops,
        "cell": cell,
        "agent": "a",
        "status": "ok",
        **more,
    }


def test_a_row_above_its_ceiling_raises_it_for_its_threads_and_more() -> None:
    calibration = fake_calibration("c", 100e9)
    assert not observe(calibration, row(50.0, 1), "r")  # below: nothing changes
    assert "observed" not in calibration
    assert observe(calibration, row(150.0, 1, cell=3, workload="conv2d"), "r")
    seen = calibration["observed"]["float32"]["1"]
    assert seen["flops_per_second"] == pytest.approx(150e9)
    assert seen["calibrated_flops_per_second"] == pytest.approx(100e9)
    assert (seen["run_id"], seen["cell"], seen["workload"]) == ("r", 3, "conv2d")
    assert peak_flops(calibration, "float32", 1) == pytest.approx(150e9)
    # What one thread reached, two can: the 2-thread ceiling is raised only above its own.
    assert peak_flops(calibration, "float32", 2) == pytest.approx(200e9)
    assert observe(calibration, row(260.0, 2), "r")
    assert peak_flops(calibration, "float32", 2) == pytest.approx(260e9)
    assert peak_flops(calibration, "float32", 1) == pytest.approx(150e9)  # not by 2 threads
    assert peak_flops(calibration, "float64", 1) == pytest.approx(100e9)  # another dtype
    for failed in (row(999.0, 1, status="failed"), row(float("nan"), 1), row(999.0, 1, dtype="x")):
        assert not observe(calibration, failed, "r")
    # A training step's FLOPs are a model (3x forward) a framework can beat: never a ceiling.
    assert not observe(calibration, row(999.0, 1, phase="train"), "r")
    assert peak_flops(calibration, "float32", 1) == pytest.approx(150e9)
    older = fake_calibration("old", 1.0)
    assert merge_observed(older, calibration["observed"])
    assert not merge_observed(older, calibration["observed"])  # nothing higher the second time
    assert older["observed"] == calibration["observed"]


def test_a_run_faster_than_its_calibration_reports_no_fraction_above_one(tmp_path: Path) -> None:
    cached = cache(tmp_path, fake_calibration("slow-calibration", 1e9))
    manifests = write_fake_agents(tmp_path / "agents", {"steady": {}})
    # A fake gemm step sleeps m microseconds whatever the batch: batch 4 is 4x the FLOP/s of
    # batch 1, each far above 1 GFLOP/s; cells are measured in the order of the batch sizes.
    done = subprocess.run(
        collector(tmp_path, *run_arguments(manifests, tmp_path / "run", "1,4,2", 2000)),
        env=environment(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "calibrating" not in done.stderr  # the faked one, from the cache
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet").sort_values("cell")
    assert rows["batch_size"].tolist() == [1, 4, 2]
    best = rows["gflops_per_second"].max()
    assert best > 10 and rows["gflops_per_second"].idxmax() == rows.index[1]
    assert (rows["peak_fraction"] <= 1 + 1e-9).all()
    # Every row's ceiling is the fastest row's, the first row's too (recorded before it).
    assert rows["peak_flops_per_second"].tolist() == pytest.approx([best * 1e9] * 3)
    assert rows["peak_fraction"].tolist() == pytest.approx(
        (rows["gflops_per_second"] / best).tolist()
    )
    assert (rows["calibration_id"] == "slow-calibration").all()
    metadata = json.loads((tmp_path / "run" / "run.json").read_text())
    threads = str(int(rows["intra_op_threads"].iloc[0]))
    seen = metadata["calibration"]["observed"]["float32"][threads]
    assert seen["flops_per_second"] == pytest.approx(best * 1e9)
    assert (seen["run_id"], seen["cell"], seen["agent"]) == (metadata["run_id"], 1, "steady")
    assert seen["calibrated_flops_per_second"] == pytest.approx(1e9 * int(threads))
    stored = ResultStore(tmp_path / "store.sqlite")
    assert (stored.run_metadata(metadata["run_id"]) or {})["calibration"] == metadata["calibration"]
    assert stored.results(metadata["run_id"])["peak_fraction"].max() <= 1 + 1e-9
    # The host's cache keeps the raised ceiling for the next run; its measurement unchanged.
    after = json.loads(cached.read_text())
    assert after["observed"] == metadata["calibration"]["observed"]
    assert after["peak_flops"] == fake_calibration("slow-calibration", 1e9)["peak_flops"]
    listed = subprocess.run(
        [str(COLLECTOR), "calibrate"],
        env={**environment(tmp_path), "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert listed.returncode == 0, listed.stderr
    assert re.search(rf"raised float32 +│ {threads} ", listed.stdout), listed.stdout
    assert f"run {metadata['run_id']} cell 1: steady gemm" in listed.stdout


def test_a_resumed_run_keeps_its_own_calibration(tmp_path: Path) -> None:
    cached = cache(tmp_path, fake_calibration("first-calibration", 1e18))  # never exceeded
    manifests = write_fake_agents(tmp_path / "agents", {"steady": {}})
    out = tmp_path / "run"
    arguments = run_arguments(manifests, out, "1,2,3,4,5", 20000)  # 20 ms a step
    with (tmp_path / "collector.log").open("wb") as log:
        process = subprocess.Popen(
            collector(tmp_path, *arguments),
            env=environment(tmp_path),
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 120
    while not (out / "results.parquet").exists() and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=30)
    before = pd.read_parquet(out / "results.parquet")
    assert 1 <= len(before) < 5, (tmp_path / "collector.log").read_text()
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    # The host is calibrated again meanwhile, with another result.
    cached.write_text(json.dumps(fake_calibration("second-calibration", 2e18)))
    resumed = subprocess.run(
        collector(tmp_path, "run", "--resume", run_id),
        env=environment(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert len(rows) == 5 and set(rows["status"]) == {"ok"}
    assert set(rows["calibration_id"]) == {"first-calibration"}
    for _, one in rows.iterrows():
        threads = int(one["intra_op_threads"])
        assert one["peak_flops_per_second"] == pytest.approx(1e18 * min(threads, 2))
    metadata = json.loads((out / "run.json").read_text())
    assert metadata["calibration"]["id"] == "first-calibration"
    assert len(metadata["resumed"]) == 1
