"""A real `collector run` (local agents of the framework-free fake plugin, whose steps sleep)
with a host calibration: every row carries the ceiling columns, computed from the row's own
FLOPs and time and the calibration the run recorded; the report draws the roofline; and
`collector compare` of two runs from different hosts (a fingerprint changed in the stored
metadata) compares fractions of each host's peak, and says so."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from typer.testing import CliRunner

from fwbench.collector.calibration.ceiling import bandwidth, peak_flops
from fwbench.collector.cli import app
from fwbench.collector.store.database import ResultStore
from fwbench.spec import load_catalogue

sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent
from fake_agent import write_fake_agents

pytestmark = pytest.mark.timing  # its ceilings come from measured times

COLLECTOR = Path(sys.executable).with_name("collector")


def store(root: Path) -> list[str]:
    return ["--store", str(root / "store.sqlite")]


def collector(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COLLECTOR), *args, *store(root)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "FWBENCH_CALIBRATION": "quick",
            "FWBENCH_CALIBRATION_DIR": str(root / "calibration"),
        },
        check=False,
    )


def invoke(root: Path, *args: str) -> Any:
    """The collector in this process (what the tests ask after the run)."""
    env = {"FWBENCH_CALIBRATION": "quick", "FWBENCH_CALIBRATION_DIR": str(root / "calibration")}
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("calibrated")
    manifests = write_fake_agents(root / "agents", {"steady": {}})
    done = collector(
        root,
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "steady",
        "--workloads",
        "gemm",
        "--phases",
        "infer,train",
        "--batch-sizes",
        "1,2",
        "--dtypes",
        "float32,float64",
        "--param",
        "m=2000",
        "--min-seconds",
        "0.1",
        "--out",
        str(root / "run"),
    )
    assert done.returncode == 0, done.stderr
    assert "calibrating this host (quick" in done.stderr
    return root, json.loads((root / "run" / "run.json").read_text())["run_id"]


def test_every_row_carries_its_ceiling_from_its_own_figures(measured: tuple[Path, str]) -> None:
    root, run_id = measured
    store = ResultStore(root / "store.sqlite")
    metadata: dict[str, Any] = store.run_metadata(run_id) or {}
    calibration = metadata["calibration"]
    assert calibration["effort"] == "quick" and calibration["peak_flops"]
    rows = store.results(run_id)
    assert len(rows) == 8 and (rows["status"] == "ok").all()
    catalogue = load_catalogue()
    for row in rows.to_dict("records"):
        threads = int(row["intra_op_threads"])
        peak = peak_flops(calibration, row["dtype"], threads)
        assert peak is not None and row["peak_flops_per_second"] == pytest.approx(peak)
        achieved = row["flops_per_item"] * row["items_per_sample"] / row["median_seconds"]
        assert row["peak_fraction"] == pytest.approx(achieved / peak)
        assert row["bandwidth_bytes_per_second"] == pytest.approx(bandwidth(calibration, threads))
        assert row["calibration_id"] == calibration["id"]
        params = json.loads(row["params"])
        intensity = catalogue.arithmetic_intensity(
            "gemm", row["phase"], params, row["batch_size"], row["dtype"]
        )
        assert row["arithmetic_intensity"] == pytest.approx(intensity)
    # float64 moves twice the bytes of float32 for the same FLOPs.
    by_dtype = rows.groupby("dtype")["arithmetic_intensity"].first()
    assert by_dtype["float32"] == pytest.approx(2 * by_dtype["float64"])
    # The run folder's table has them too.
    folder = pd.read_parquet(root / "run" / "results.parquet")
    assert folder["peak_fraction"].notna().all()


def test_the_cached_calibration_serves_the_next_run(measured: tuple[Path, str]) -> None:
    root, run_id = measured
    done = invoke(root, "calibrate", "--json")
    assert done.exit_code == 0 and "calibrating" not in done.stderr
    metadata = ResultStore(root / "store.sqlite").run_metadata(run_id) or {}
    assert json.loads(done.stdout) == metadata["calibration"]


def test_the_report_draws_the_roofline(measured: tuple[Path, str]) -> None:
    root, run_id = measured
    done = invoke(root, "report", run_id, "--out", str(root / "report"), *store(root))
    assert done.exit_code == 0, done.output
    html = (root / "report" / "report.html").read_text()
    assert 'id="fig-roofline"' in html and "Roofline" in html
    assert (root / "report" / "figures" / "roofline.png").stat().st_size > 10_000


def _copy_run(root: Path, run_id: str, new_id: str, fingerprint: str, peak_scale: float) -> None:
    """The run again under `new_id`, as if measured on the host `fingerprint` with a peak
    `peak_scale` times as high: same samples, same seconds."""
    store = ResultStore(root / "store.sqlite")
    metadata = store.run_metadata(run_id) or {}
    calibration = {**metadata["calibration"], "fingerprint_id": fingerprint}
    calibration["fingerprint"] = {**calibration["fingerprint"], "hostname": f"host-{fingerprint}"}
    copied = {**metadata, "run_id": new_id, "calibration": calibration}
    store.start_run(new_id, root / new_id, metadata["started_at"], copied)
    samples = store.samples(run_id)
    for row in store.results(run_id).to_dict("records"):
        row = {k: (None if v is pd.NA else v) for k, v in row.items()}
        row.update(run_id=new_id, peak_flops_per_second=row["peak_flops_per_second"] * peak_scale)
        cell = samples[samples["cell"] == row["cell"]]
        ns = (cell["seconds"] * 1e9).round().astype("int64").tolist()
        store.add_result(new_id, row, ns)
    store.finish_run(new_id, "ok", metadata["finished_at"], copied)


def test_compare_across_hosts_uses_peak_fractions_and_says_so(measured: tuple[Path, str]) -> None:
    root, run_id = measured
    fingerprint = (ResultStore(root / "store.sqlite").run_metadata(run_id) or {})["calibration"]
    _copy_run(root, run_id, "same-host", fingerprint["fingerprint_id"], 1.0)
    _copy_run(root, run_id, "other-host", "feedfacecafe", 2.0)
    same = invoke(root, "compare", run_id, "same-host", "--json", *store(root))
    assert same.exit_code == 0, same.output
    document = json.loads(same.stdout)
    assert document["basis"] == "seconds" and "other hosts" not in document["title"]
    assert all(c["speedup"] == pytest.approx(1.0) for c in document["comparisons"])
    other = invoke(root, "compare", run_id, "other-host", "--json", *store(root))
    assert other.exit_code == 0, other.output
    document = json.loads(other.stdout)
    assert document["basis"] == "peak fraction"
    assert "fractions of each one's peak" in document["title"]
    assert [h["hostname"] for h in document["hosts"]][1] == "host-feedfacecafe"
    # Same seconds on a host with twice the peak: half the fraction of its peak.
    assert len(document["comparisons"]) == 8
    for comparison in document["comparisons"]:
        assert comparison["speedup"] == pytest.approx(0.5)
        assert "peak fraction: times x2" in comparison["notes"]
    table = invoke(root, "compare", run_id, "other-host", *store(root))
    assert "fractions of each one's peak" in " ".join(table.stdout.split())
