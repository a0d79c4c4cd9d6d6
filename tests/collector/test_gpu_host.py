"""The GPU-host script (tests/benchmarks/gpu_host.py) end to end on this CPU: --cpu-dry-run
with the framework-free fake agent in an existing interpreter (this one), through the real
collector (doctor, three sweeps, existing-environment launcher) and the page generator. The
fake plugin has gemm (float32) and lenet (infer) only: bf16 and conv2d cells are refused,
which the page must list; this interpreter has no torch, so the bare script fails, which the
page must say instead of inventing a peak."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(TESTS), str(TESTS / "benchmarks")]  # fake_agent; gpu_host, gpu_doc

import gpu_doc  # noqa: E402
import gpu_host  # noqa: E402
from fake_agent import write_fake_agents  # noqa: E402


def test_dry_run_measures_every_sweep_and_writes_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    out, doc = tmp_path / "out", tmp_path / "gpu.md"
    options = ["--cpu-dry-run", "--agents", "fake", "--manifests", str(manifests)]
    code = gpu_host.main(
        [*options, "--python", sys.executable, "--out", str(out), "--doc", str(doc)]
    )
    assert code == 0
    record = json.loads((out / "gpu-host.json").read_text())
    names = ["gemm", "gemm-tf32", "conv2d", "lenet", "attention", "transformers", "generate"]
    assert [s["name"] for s in record["sweeps"]] == names
    assert [s["tf32"] for s in record["sweeps"]] == ["off"] + ["on"] + ["off"] * 5
    assert [s["modes"] for s in record["sweeps"]][4:] == ["all"] * 3  # torch eager and compile
    assert all(s["exit_code"] in (0, 1) for s in record["sweeps"]), record["sweeps"]
    rows = gpu_doc.load_rows(out, record)
    ok = rows[rows["status"] == "ok"]
    assert set(ok["environment_source"]) == {"existing"}
    gemm = ok[ok["workload"] == "gemm"]
    assert sorted(set(gemm["precision"])) == ["fp32", "tf32"]  # tf32 = the FWBENCH_TF32 sweep
    assert set(gemm[gemm["precision"] == "tf32"]["sweep"]) == {"gemm-tf32"}
    page = doc.read_text()
    assert page.startswith("# GPU results (CPU DRY RUN: not GPU results)")
    # Every ok gemm row is in the table with its TFLOP/s from the row's own figure.
    for _, row in gemm.iterrows():
        line = f"| fake | {row['phase']} | {row['precision']} | {row['median_seconds'] * 1e3:.3f} |"
        assert line in page
        assert f"{line} - | {row['gflops_per_second'] / 1e3:.3g} |" in page
    assert "| lenet | fake | eager | infer | fp32 | 2 |" in page
    # The fake generates (prefill 20 us a prompt token, 200 us a token): a row per prompt and
    # batch, its figures from the row; its missing transformers are listed as refused.
    generate = ok[ok["workload"] == "generate"].sort_values(["batch_size", "prompt_tokens"])
    assert list(zip(generate["batch_size"], generate["prompt_tokens"], strict=True)) == [
        (1, 8),
        (1, 16),
        (2, 8),
        (2, 16),
    ]
    first = generate.iloc[0]
    line = f"| fake | eager | fp32 | 1 | 8 | {first['time_to_first_token_seconds'] * 1e3:.2f} |"
    assert line in page
    assert "fake bert train fp32 batch 2: unsupported" in page
    # Refused cells are listed, and the missing bare script is said, not papered over.
    assert "fake gemm infer bf16 batch 1: unsupported UNIMPLEMENTED" in page
    assert "fake conv2d train fp32 batch 2: unsupported" in page
    assert "not measured (the bare bf16 run failed)" in page
    assert "- bare bfloat16: " in page and "torch" in page
    assert "TensorFlow (tf-cuda) cannot run here" in page
    assert "## Method" in page


def test_missing_collector_packages_stop_the_script_with_the_wheels_to_carry(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    needs = {**gpu_host.COLLECTOR_NEEDS, "no_such_module_xyz": "no-such-dist"}
    monkeypatch.setattr(gpu_host, "COLLECTOR_NEEDS", needs)
    assert gpu_host.main(["--out", str(tmp_path / "out"), "--doc", str(tmp_path / "d.md")]) == 2
    message = capsys.readouterr().err
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert "cannot import what the collector needs: no-such-dist." in message
    assert f"pip download --only-binary=:all: --python-version {version}" in message
    assert message.count("no-such-dist") >= 3 and "typer" not in message
    assert not (tmp_path / "out").exists() and not (tmp_path / "d.md").exists()


def test_grpc_companions_to_carry_match_the_installed_grpcio() -> None:
    from importlib.metadata import version

    wanted = gpu_host.pinned(["grpcio-reflection", "docker"])
    assert wanted == [f"grpcio-reflection=={version('grpcio')}", "docker"]


def test_energy_per_item_divides_the_timed_phase_energy_by_the_items_timed() -> None:
    row = pd.Series({"gpu_energy_joules": 10.0, "n": 5, "items_per_sample": 4})
    assert gpu_doc._energy_per_item(row) == pytest.approx(0.5)
    assert gpu_doc._energy_per_item(row.drop("gpu_energy_joules")) is None


def test_an_out_of_memory_cell_is_resource_exhausted_and_the_same_agent_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A plugin's OutOfMemory (the fake's allocator refuses m > 30000, as CUDA's would a
    too-large matrix) fails that cell alone; the next cell runs in the same agent process."""
    import subprocess

    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    out = tmp_path / "run"
    command = [sys.executable, "-m", "fwbench.collector.cli", "run", "--agents", "fake"]
    command += ["--python", f"fake={sys.executable}", "--manifests", str(manifests)]
    command += ["--workloads", "gemm,lenet", "--phases", "infer", "--batch-sizes", "1"]
    command += ["--param", "m=32000", "--iterations", "3", "--min-seconds", "0", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 1, done.stdout + done.stderr  # one cell failed
    table = pd.read_parquet(out / "results.parquet").sort_values("cell")
    assert list(table["workload"]) == ["gemm", "lenet"]
    assert list(table["status"]) == ["failed", "ok"]
    assert table["error_code"].iloc[0] == "RESOURCE_EXHAUSTED"
    assert "out of memory" in table["error"].iloc[0]
    assert table["agent_pid"].nunique() == 1


def test_the_environment_probe_sees_the_pythonpath_the_agent_will_have(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Wheels carried to a GPU host are often installed with `pip install --target DIR` and
    PYTHONPATH=DIR: the probe must look there as the agent process will (overlay first)."""
    from fwbench.collector.agents import existing

    python = tmp_path / "python"  # an interpreter that reports what it was given
    python.write_text('#!/bin/sh\nprintf \'{"pythonpath": "%s"}\\n\' "$PYTHONPATH"\n')
    python.chmod(0o755)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    monkeypatch.setenv("PYTHONPATH", "/carried/site")
    facts = existing.probe(str(python), str(overlay), "fake", ())
    assert facts["pythonpath"] == f"{overlay}:/carried/site"


def test_a_collector_that_does_not_import_stops_the_script_with_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Found is not enough: a wheel that is there but does not fit (on the first GPU lease,
    grpcio-health-checking generated for a newer protobuf) must stop the script at once, with
    the import's own error, instead of failing every sweep."""
    broken = tmp_path / "broken" / "typer"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('gencode 7.35.1 runtime 6.33.6')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))
    out = tmp_path / "out"
    code = gpu_host.main(["--cpu-dry-run", "--out", str(out), "--doc", str(tmp_path / "g.md")])
    assert code == 2
    said = capsys.readouterr().err
    assert "does not import" in said and "gencode 7.35.1 runtime 6.33.6" in said
    assert "pip download" in said
    assert not out.exists()  # nothing was run


def test_the_deadline_interrupts_a_sweep_and_keeps_what_it_measured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """gpu_host.collector past its seconds: SIGTERM, the collector stores the interrupted run
    with the cells it finished, and the script goes on (a leased GPU's time bounds it)."""
    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    out = tmp_path / "run"
    options = ["run", "--agents", "fake", "--python", f"fake={sys.executable}"]
    options += ["--manifests", str(manifests), "--workloads", "lenet", "--phases", "infer"]
    options += ["--batch-sizes", "1,2,3,4,5,6", "--min-seconds", "2", "--out", str(out)]
    env = {**gpu_host.source_environment(), "FWBENCH_CALIBRATION": "off"}
    began = time.monotonic()
    code = gpu_host.collector(options, env, tmp_path / "run.log", seconds=9)
    assert time.monotonic() - began < 9 + gpu_host.STOP_GRACE_S
    assert code != 0, (tmp_path / "run.log").read_text()[-2000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert 1 <= (rows["status"] == "ok").sum() < 6, rows[["batch_size", "status"]]
    assert "interrupted" in json.loads((out / "run.json").read_text())["status"]


def test_docs_gpu_md_is_the_page_of_the_committed_gpu_run() -> None:
    """docs/gpu.md is generated, never edited: gpu_doc.py on the run's raw output (its rows,
    bare samples and FINDINGS.md under docs/data/) gives it back byte for byte. The first run
    timed a 50-step bare burst, which the page must say."""
    data = TESTS.parent / "docs" / "data" / "gpu-h200-2026-11-26"
    page = gpu_doc.render(data)
    assert page == (TESTS.parent / "docs" / "gpu.md").read_text()
    assert "with no minimum time: for a short product that is a burst" in page
    assert "## What this run showed" in page and "## Method" in page
    assert "Cells that did not run\n\nNone: every cell ran." in page
