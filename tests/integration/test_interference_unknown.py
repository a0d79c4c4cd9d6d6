"""An outside agent without the affinity series (agents/examples/numpy-gemm: written without
the runtime, it serves no /metrics), attached beside a fake agent of the runtime while a hog
spins on every CPU: the fake's rows are interfered, the outside agent's can only be
"interference unknown", never a plain `ok`, in the end-of-run table, compare and the report."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents
from quiet_host import hog

from fwbench.collector.agents.client import AgentClient
from fwbench.collector.store.interference_columns import UNKNOWN

pytestmark = pytest.mark.timing  # a hog beside the agents
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "agents" / "examples" / "numpy-gemm"
PROTO = REPO / "proto" / "fwbench" / "agent" / "v1"


@pytest.fixture
def outside(tmp_path: Path) -> Iterator[str]:
    """The example agent as a process of its own, as its author would start it."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    protoc = [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}", f"--python_out={stubs}"]
    made = subprocess.run(
        [*protoc, f"--grpc_python_out={stubs}", str(PROTO / "agent.proto")],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    env = {**os.environ, "PYTHONPATH": str(stubs), "GRPC_PORT": str(port), "FWBENCH_THREADS": "1"}
    process = subprocess.Popen([sys.executable, str(EXAMPLE / "agent.py")], env=env)
    client = AgentClient("numpy-gemm", f"127.0.0.1:{port}")
    try:
        client.wait_healthy(60, alive=lambda: process.poll() is None)
        yield f"numpy-gemm@127.0.0.1:{port}"
    finally:
        client.close()
        process.terminate()
        process.wait(10)


def test_an_agent_without_the_affinity_series_is_never_a_plain_ok(
    tmp_path: Path, outside: str, isolated_store
) -> None:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    out = tmp_path / "run"
    command = ["run", "--manifests", str(manifests), "--agents", f"fake,{outside}"]
    command += ["--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1"]
    command += ["--param", "m=64", "--repeat", "2", "--min-seconds", "0.3", "--out", str(out)]
    with hog():
        done = collector(*command, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]
    ours, theirs = rows[rows["agent"] == "fake"], rows[rows["agent"] == "numpy-gemm"]
    assert ours["interfered"].all() and theirs["interfered"].isna().all()
    said = " ".join(done.stdout.split())  # the status cell may wrap: "ok ? interference"
    assert said.count("ok ? interference") == len(theirs), done.stdout
    assert f"? {len(theirs)} cell(s): {UNKNOWN}" in said
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    compared = collector("compare", run_id, "--baseline", "fake", "--format", "json", cwd=tmp_path)
    (comparison,) = json.loads(compared.stdout)["comparisons"]
    assert f"{UNKNOWN} for all 2 of numpy-gemm's processes here" in comparison["notes"]
    assert comparison["verdict"] == "undecided"  # the fake's rows were all interfered
    table = collector("compare", run_id, "--baseline", "fake", cwd=tmp_path)
    assert f"{UNKNOWN} for some of the processes compared" in table.stdout, table.stdout
    reported = collector("report", run_id, "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    page = (tmp_path / "report" / "report.md").read_text()
    flagged = [x for x in page.splitlines() if "| numpy-gemm |" in x and x.endswith(f"{UNKNOWN} |")]
    assert len(flagged) == 2, page  # its two processes in the statistics table
