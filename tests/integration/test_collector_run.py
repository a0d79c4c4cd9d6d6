"""`collector run` end to end, as a user runs it: the real console script, real agent
processes, results on disk; crashes, interrupts and incompatible agents included."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from concurrent import futures
from pathlib import Path

import grpc
import pandas as pd
import pytest
from collector_cli import COLLECTOR, collector
from grpc_health.v1 import health, health_pb2_grpc
from interrupted import with_sigint

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.collector.store.schema import COLUMN_NAMES
from fwbench.spec import SPEC_VERSION

SMALL_GEMM = ["--param", "m=128", "--param", "n=128", "--param", "k=128"]
QUICK = ["--warmup", "1", "--iterations", "3", "--min-seconds", "0"]


def agent_pids(out: Path) -> list[int]:
    meta = json.loads((out / "run.json").read_text())
    return [int(a["describe"]["pid"]) for a in meta["agents"].values()]


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_collector_run_measures_and_persists_everything(torch_env, tmp_path, isolated_store):
    out = tmp_path / "run"
    done = collector(
        "run",
        "--agents",
        "torch-cpu",
        "--workloads",
        "gemm,lenet",
        "--phases",
        "train,infer",
        "--batch-sizes",
        "1,2",
        *SMALL_GEMM,
        *QUICK,
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    results = pd.read_parquet(out / "results.parquet")
    assert list(results.columns) == list(COLUMN_NAMES)
    assert len(results) == 8 and set(results.status) == {"ok"}
    assert set(results.workload) == {"gemm", "lenet"} and set(results.batch_size) == {1, 2}
    assert (results.n >= 3).all() and (results.median_seconds > 0).all()
    assert results.launcher.eq("local").all() and results.framework.eq("torch").all()
    gemm = results[results.workload == "gemm"].iloc[0]
    assert gemm.flops_per_item == 3 * 2 * 128**3  # train phase first, 3x forward
    samples = pd.read_parquet(out / "samples.parquet")
    assert len(samples) == results.n.sum()
    assert len(pd.read_csv(out / "results.csv")) == 8
    meta = json.loads((out / "run.json").read_text())
    assert meta["status"] == "ok" and meta["host"]["hostname"]
    assert meta["agents"]["torch-cpu"]["describe"]["identity"]["framework"] == "torch"
    assert (out / "logs" / "torch-cpu.log").exists()
    assert all(process_gone(pid) for pid in agent_pids(out))
    listed = collector("results", cwd=tmp_path)
    assert meta["run_id"] in listed.stdout


def test_collector_run_joins_telemetry_over_the_timed_phase(torch_env, tmp_path, isolated_store):
    """CPU, iowait and memory columns from the agent's /metrics, the raw series kept; and none
    with scraping off."""
    common = ["--agents", "torch-cpu", "--workloads", "lenet", "--phases", "train"]
    common += ["--batch-sizes", "8", "--warmup", "1", "--min-seconds", "1.5"]
    done = collector("run", *common, "--out", str(tmp_path / "on"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr + done.stdout
    row = pd.read_parquet(tmp_path / "on" / "results.parquet").iloc[0]
    assert pd.isna(row.telemetry_error), row.telemetry_error
    assert row.telemetry_scrapes >= 3  # 1.5 s at the default 0.25 s interval
    # LeNet training keeps a core busy; the process cannot use more than the host has.
    assert 30 < row.cpu_user_percent + row.cpu_system_percent <= 100 * os.cpu_count() + 10
    assert 0 <= row.host_iowait_percent < 100
    assert 0 < row.host_cpu_busy_percent <= 100
    assert 100e6 < row.rss_mean_bytes <= row.rss_peak_bytes < 8e9  # torch alone is > 100 MB
    assert pd.isna(row.gpu_utilization_mean_percent)  # no GPU here
    series = pd.read_parquet(tmp_path / "on" / "telemetry.parquet")
    assert set(series.cell) == {0}
    assert {"fwbench_process_cpu_seconds_total", "fwbench_host_cpu_seconds_total"} <= set(
        series.metric
    )
    measured = series[
        (series.time >= row.measure_started_at) & (series.time <= row.measure_ended_at)
    ]
    assert measured.time.nunique() == row.telemetry_scrapes
    assert series.time.min() < row.measure_started_at < row.measure_ended_at < series.time.max()

    off = collector(
        "run", *common, "--scrape-interval", "0", "--out", str(tmp_path / "off"), cwd=tmp_path
    )
    assert off.returncode == 0, off.stderr + off.stdout
    row = pd.read_parquet(tmp_path / "off" / "results.parquet").iloc[0]
    assert row.telemetry_error == "scraping off (--scrape-interval 0)"
    assert pd.isna(row.cpu_user_percent) and pd.isna(row.rss_peak_bytes)
    assert len(pd.read_parquet(tmp_path / "off" / "telemetry.parquet")) == 0


def wait_for_rows(store: Path, count: int, process: subprocess.Popen, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        if store.exists():
            with sqlite3.connect(store) as db:
                try:
                    if db.execute("SELECT COUNT(*) FROM results").fetchone()[0] >= count:
                        return
                except sqlite3.OperationalError:
                    pass  # tables not created yet
        time.sleep(0.2)
    raise AssertionError(f"fewer than {count} results after {timeout} s")


def start_long_run(tmp_path: Path, out: Path) -> subprocess.Popen:
    """Six gemm cells of about 1.5 s each."""
    return subprocess.Popen(
        with_sigint(
            [
                COLLECTOR,
                "run",
                "--agents",
                "torch-cpu",
                "--workloads",
                "gemm",
                "--phases",
                "infer",
                "--batch-sizes",
                "1,2,3,4,5,6",
                "--param",
                "m=256",
                "--param",
                "n=256",
                "--param",
                "k=256",
                "--warmup",
                "0",
                "--min-seconds",
                "1.5",
                "--out",
                str(out),
            ]
        ),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_collector_run_survives_agent_killed_mid_run(torch_env, tmp_path, isolated_store):
    out = tmp_path / "run"
    process = start_long_run(tmp_path, out)
    wait_for_rows(isolated_store, 2, process)
    [pid] = agent_pids(out)
    os.kill(pid, signal.SIGKILL)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 1, stderr
    results = pd.read_parquet(out / "results.parquet").sort_values("cell")
    assert len(results) == 6
    # The cell the kill interrupted fails with the agent's exit status; a fresh agent process
    # measures the rest of the sweep; what was measured before is kept intact.
    failed = results[results.status == "failed"]
    assert len(failed) == 1 and failed.error.str.contains("SIGKILL").all()
    ok = results[results.status == "ok"]
    assert len(ok) == 5 and (ok.n > 0).all()
    assert failed.cell.iloc[0] >= 2  # the two rows waited for were measured before the kill
    after = results[results.cell > failed.cell.iloc[0]]
    assert (after.agent_pid != pid).all()
    assert json.loads((out / "run.json").read_text())["status"] == "failed"


def test_collector_run_interrupt_stops_agents_and_keeps_results(
    torch_env, tmp_path, isolated_store
):
    out = tmp_path / "run"
    process = start_long_run(tmp_path, out)
    wait_for_rows(isolated_store, 1, process)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr
    results = pd.read_parquet(out / "results.parquet")
    assert (results.status == "ok").sum() >= 1
    # The cell in progress is recorded as cancelled, unless the interrupt landed between two
    # cells (while the last result was being saved).
    assert set(results.status) <= {"ok", "cancelled"}
    assert results.status.iloc[:-1].eq("ok").all()
    assert json.loads((out / "run.json").read_text())["status"] == "interrupted"
    assert all(process_gone(pid) for pid in agent_pids(out))


class FutureAgent(agent_pb2_grpc.AgentServiceServicer):
    """An agent from a future major version of the protocol."""

    def Describe(self, request, context):  # noqa: N802
        return agent_pb2.DescribeResponse(spec_version="2.0")


@pytest.fixture
def future_agent_address():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(FutureAgent(), server)
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}"
    server.stop(0)


def test_collector_run_refuses_incompatible_agent(future_agent_address, tmp_path, isolated_store):
    out = tmp_path / "run"
    done = collector(
        "run", "--agents", f"future@{future_agent_address}", "--out", str(out), cwd=tmp_path
    )
    assert done.returncode == 2
    assert f"speaks protocol '2.0'; this collector speaks {SPEC_VERSION}" in done.stderr
    assert not out.exists() and not isolated_store.exists()


def test_collector_describe_prints_agent_report(torch_env, tmp_path):
    done = collector("describe", "torch-cpu", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout)
    assert reply["identity"]["framework"] == "torch"
    assert reply["spec_version"] == SPEC_VERSION


def test_collector_run_attaches_to_running_agent_and_its_sweep_goes_on_past_out_of_memory(
    torch_env, tmp_path, isolated_store, agent_process_starter
):
    """An agent the collector did not start is measured, telemetry included, and left running;
    a batch size too large for its memory is a RESOURCE_EXHAUSTED row; the sweep continues."""
    agent, port = agent_process_starter(torch_env, tmp_path, f"--memory-limit-bytes={6 * 1024**3}")
    out = tmp_path / "run"
    done = collector(
        "run",
        "--agents",
        f"torch-cpu@127.0.0.1:{port}",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,1024,2",  # 1024 x three 2048^2 fp32 matrices = 48 GiB, 8x the agent's limit
        "--param",
        "m=2048",
        "--param",
        "n=2048",
        "--param",
        "k=2048",
        # Half a second of timed work a cell at least: a few microseconds of gemm may not move
        # the process's CPU counters (10 ms resolution), which made the attached test flaky.
        *QUICK[:-1],
        "0.5",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # one cell failed
    table = pd.read_parquet(out / "results.parquet").sort_values("cell")
    assert list(table["batch_size"]) == [1, 1024, 2]
    assert list(table["status"]) == ["ok", "failed", "ok"]
    assert table["error_code"].iloc[1] == "RESOURCE_EXHAUSTED"
    assert "out of memory" in table["error"].iloc[1]
    assert table.launcher.eq("attached").all()
    # Its /metrics port comes from Describe: telemetry works for attached agents too.
    measured = table[table.status == "ok"]
    assert measured.telemetry_error.isna().all(), measured.telemetry_error.tolist()
    assert (measured.cpu_user_percent + measured.cpu_system_percent > 0).all()
    assert agent.poll() is None  # an attached agent is not ours to stop
