"""Host calibration (docs/calibration.md): `collector calibrate` really measures (quick sizes,
the probes run as child processes), caches per host fingerprint, reuses the cache, measures
again with --force or when the fingerprint changed; and a row's ceiling columns follow from
the calibration by the documented rule."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fwbench.collector.calibration import measure, probe
from fwbench.collector.calibration.cache import cache_path, host_fingerprint
from fwbench.collector.calibration.ceiling import bandwidth, ceiling_columns, peak_flops
from fwbench.collector.cli import app
from fwbench.collector.run.normalize import ceilings
from fwbench.spec import load_catalogue


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "calibration"
    monkeypatch.setenv("FWBENCH_CALIBRATION_DIR", str(folder))
    monkeypatch.setenv("FWBENCH_CALIBRATION", "quick")
    return folder


def calibrate(*args: str) -> tuple[dict[str, Any], str]:
    done = CliRunner().invoke(app, ["calibrate", "--quick", "--json", *args])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout), done.stderr


def test_calibrate_measures_caches_reuses_and_force_measures_again(cache: Path) -> None:
    first, said = calibrate()
    assert "calibrating this host" in said
    assert first["fingerprint"] == host_fingerprint()
    stored = cache_path(first["fingerprint"], "quick")
    assert stored.parent == cache and json.loads(stored.read_text()) == first
    for dtype in ("float32", "float64"):
        for threads in first["method"]["thread_counts"]:
            trial = first["peak_flops"][dtype][str(threads)]
            assert trial["flops_per_second"] == pytest.approx(
                2 * trial["size"] ** 3 / trial["best_seconds"]
            )
            assert trial["library"].startswith("numpy") and trial["threads"] == threads
    for triad in first["bandwidth"].values():
        assert triad["bytes_per_second"] == pytest.approx(
            24 * triad["elements"] / triad["best_seconds"]
        )
    again, said = calibrate()
    assert again == first and "calibrating" not in said  # from the cache, nothing measured
    forced, said = calibrate("--force")
    assert "calibrating this host" in said
    assert forced["measured_at"] != first["measured_at"]
    assert json.loads(stored.read_text())["measured_at"] == forced["measured_at"]


def test_a_changed_fingerprint_is_measured_afresh(cache: Path) -> None:
    first, _ = calibrate()
    stored = cache_path(first["fingerprint"], "quick")
    other = {**first, "fingerprint": {**first["fingerprint"], "logical_cpus": 4096}}
    stored.write_text(json.dumps(other))  # as if the machine had changed since
    fresh, said = calibrate()
    assert "calibrating this host" in said
    assert fresh["fingerprint"] == host_fingerprint()
    assert fresh["measured_at"] != first["measured_at"]


def test_quick_measures_numpy_alone_and_an_unknown_interpreter_is_refused(cache: Path) -> None:
    done = CliRunner().invoke(app, ["calibrate", "--quick", "--json", "--python", sys.executable])
    assert done.exit_code == 0, done.output
    trials = json.loads(done.stdout)["gemm_trials"]
    assert trials and {trial["library"].split()[0] for trial in trials} == {"numpy"}
    missing = CliRunner().invoke(app, ["calibrate", "--python", "/no/such/python"])
    assert missing.exit_code == 2 and "no such interpreter" in missing.stderr


# --- a row's ceiling ---------------------------------------------------------------------


def calibration(one: float, every: float, bw_one: float, bw_every: float) -> dict[str, Any]:
    """A calibration of a 4-CPU host, float32 only."""
    return {
        "id": "test-calibration",
        "peak_flops": {
            "float32": {"1": {"flops_per_second": one}, "4": {"flops_per_second": every}}
        },
        "bandwidth": {"1": {"bytes_per_second": bw_one}, "4": {"bytes_per_second": bw_every}},
        "read_bandwidth": {"1": {"bytes_per_second": 1.3 * bw_one}},
        "method": {"thread_counts": [1, 4]},
    }


@pytest.mark.parametrize(
    ("threads", "expected"),
    [(1, 100.0), (2, 200.0), (3, 300.0), (4, 350.0), (8, 350.0)],
)
def test_peak_scales_one_threads_peak_up_to_the_all_cpu_peak(threads: int, expected: float) -> None:
    assert peak_flops(calibration(100.0, 350.0, 10.0, 25.0), "float32", threads) == expected
    assert peak_flops(calibration(100.0, 350.0, 10.0, 25.0), "bfloat16", threads) is None


def test_a_shared_machines_low_all_cpu_figure_never_drops_the_ceiling_below_one_cpu() -> None:
    measured = calibration(100.0, 60.0, 10.0, 8.0)
    assert peak_flops(measured, "float32", 4) == 100.0
    assert bandwidth(measured, 4) == 10.0
    assert bandwidth(calibration(1, 1, 10.0, 25.0), 2) == 20.0


def test_ceiling_columns_follow_from_the_row_and_the_calibration() -> None:
    measured = calibration(100e9, 350e9, 10e9, 25e9)
    row = {"dtype": "float32", "intra_op_threads": 2, "gflops_per_second": 50.0}
    columns = ceiling_columns(row, measured, 7.5)
    assert columns == {
        "arithmetic_intensity": 7.5,
        "peak_flops_per_second": 200e9,
        "peak_fraction": pytest.approx(0.25),
        "bandwidth_bytes_per_second": 20e9,
        "read_bandwidth_bytes_per_second": pytest.approx(13e9),  # one thread's: all it has
        "calibration_id": "test-calibration",
    }
    del measured["read_bandwidth"]  # a calibration from before the read pass was measured
    assert ceiling_columns(row, measured, 7.5)["read_bandwidth_bytes_per_second"] is None
    # No threads in effect said: the usable cores, else every CPU calibrated.
    assert ceiling_columns({**row, "intra_op_threads": 0, "usable_cores": 3}, measured, None)[
        "peak_flops_per_second"
    ] == pytest.approx(300e9)
    assert ceiling_columns({**row, "intra_op_threads": None}, measured, None)[
        "peak_flops_per_second"
    ] == pytest.approx(350e9)


@pytest.mark.parametrize(
    "row",
    [
        {"dtype": "float32", "intra_op_threads": 1},  # failed: nothing achieved
        {"dtype": "float32", "intra_op_threads": 1, "gflops_per_second": float("nan")},
        {"dtype": "float16", "intra_op_threads": 1, "gflops_per_second": 5.0},  # not calibrated
    ],
)
def test_rows_without_achieved_flops_or_a_calibrated_dtype_get_nulls_never_zeros(
    row: dict[str, Any],
) -> None:
    columns = ceiling_columns(row, calibration(100e9, 350e9, 10e9, 25e9), None)
    assert columns["peak_fraction"] is None and columns["arithmetic_intensity"] is None


def test_only_cells_on_this_machines_cpus_get_its_ceiling() -> None:
    annotate = ceilings(load_catalogue(), calibration(100e9, 350e9, 10e9, 25e9))
    row = {
        "workload": "gemm",
        "phase": "infer",
        "batch_size": 1,
        "params": json.dumps({"m": 64, "n": 64, "k": 64}),
        "dtype": "float32",
        "intra_op_threads": 1,
        "gflops_per_second": 10.0,
    }
    intensity = 2 * 64**3 / (3 * 64 * 64 * 4)
    for launcher, address in [("local", "127.0.0.1:1"), ("attached", "localhost:5")]:
        here = annotate({**row, "launcher": launcher, "address": address})
        assert here["peak_fraction"] == pytest.approx(0.1)
        assert here["arithmetic_intensity"] == pytest.approx(intensity)
    # Each framework's name for the CPU: torch "cpu", jax "cpu:0", TensorFlow "/CPU:0".
    for device in ("cpu", "cpu:0", "/CPU:0"):
        on_cpu = annotate({**row, "launcher": "local", "address": "127.0.0.1:1", "device": device})
        assert on_cpu["peak_fraction"] == pytest.approx(0.1), device
    remote = annotate({**row, "launcher": "attached", "address": "10.0.0.5:50051"})
    gpu = annotate({**row, "launcher": "local", "address": "127.0.0.1:1", "device": "cuda:0"})
    for elsewhere in (remote, gpu):  # the CPU calibration is not their ceiling
        assert elsewhere["peak_fraction"] is None and elsewhere["calibration_id"] is None
        assert elsewhere["arithmetic_intensity"] == pytest.approx(intensity)


def _sleeping_gemm(rates: dict[int, float]) -> Any:
    """A stand-in for a library's GEMM whose products take 2 n^3 / rates[n] seconds."""

    def make(dtype: str, size: int) -> tuple[Any, str]:
        return (lambda: time.sleep(2 * size**3 / rates[size])), "sleeping"

    return make


@pytest.mark.parametrize(
    ("rates", "sizes"),
    [
        # Each product is slow (33 ms to 270 ms, as on a loaded machine) but the rate keeps
        # growing: the size grows to the largest allowed.
        ({256: 1e9, 512: 4e9, 1024: 16e9, 2048: 64e9}, ["256", "512", "1024", "2048"]),
        # No faster at 1024 than at 512 (1%, under the 5% asked): 2048 is never tried.
        ({256: 10e9, 512: 20e9, 1024: 20.2e9, 2048: 80e9}, ["256", "512", "1024"]),
    ],
)
def test_the_gemm_size_grows_while_the_rate_grows(
    monkeypatch: pytest.MonkeyPatch, rates: dict[int, float], sizes: list[str]
) -> None:
    monkeypatch.setattr(probe, "_gemm_numpy", _sleeping_gemm(rates))
    found = probe.gemm("numpy", 1, "float32", 2048, 3, 0.0)
    assert list(found["rates_by_size"]) == sizes
    best = max(found["rates_by_size"].items(), key=lambda item: item[1])
    assert (str(found["size"]), found["flops_per_second"]) == best
    assert found["flops_per_second"] == pytest.approx(rates[int(best[0])], rel=0.3)
    assert found["flops_per_second"] == pytest.approx(
        2 * found["size"] ** 3 / found["best_seconds"]
    )


def test_a_failing_onednn_probe_is_recorded_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    """oneDNN goes through a private PyTorch call: a PyTorch without it leaves a trial with
    the error, and the other libraries' peaks."""

    def probe_(python: Path, threads: int, arguments: list[str]) -> dict[str, Any]:
        library = arguments[arguments.index("--library") + 1]
        if library == "onednn":
            raise measure.CalibrationError("no mkldnn_linear")
        rate = {"numpy": 1e9, "torch": 2e9}[library]
        return {
            "gemm": [
                {
                    "library": library,
                    "dtype": "float32",
                    "threads": threads,
                    "flops_per_second": rate,
                }
            ]
        }

    monkeypatch.setattr(measure, "_probe", probe_)
    monkeypatch.setattr(measure, "has_torch", lambda python: True)
    trials = measure.gemm_trials([Path("/agent/python")], measure.EFFORTS["full"])
    failed = [trial for trial in trials if "error" in trial]
    rounds, threads = measure.EFFORTS["full"].gemm_rounds, len(measure.thread_counts())
    assert len(failed) == rounds * threads and len(trials) == 3 * rounds * threads
    assert {trial["library"] for trial in failed} == {"onednn"}
    peaks = measure.best_peaks(trials)
    assert {trial["library"] for trial in peaks["float32"].values()} == {"torch"}
