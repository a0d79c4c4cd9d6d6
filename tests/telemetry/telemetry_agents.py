"""Real agent processes for the telemetry tests: `python -m fwbench.runtime.cli` with the
runtime tests' fake plugin, made loadable as a `fwbench.plugins` entry point by a throwaway
.dist-info folder on PYTHONPATH (nothing is installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc

RUNTIME_TESTS = Path(__file__).parents[1] / "runtime"
TIMED_ITERATIONS = 6

AGENT_NAMES = ("fake-a", "fake-b")


@dataclass
class AgentProcess:
    name: str
    process: subprocess.Popen[bytes]
    grpc_port: int
    metrics_port: int


def _plugin_path(folder: Path) -> str:
    """A PYTHONPATH on which importlib.metadata finds the fake plugin's entry point."""
    dist = folder / "fwbench_fake_plugin-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fwbench-fake-plugin\n")
    (dist / "entry_points.txt").write_text("[fwbench.plugins]\nfake = fake_plugin:FakePlugin\n")
    return os.pathsep.join([str(folder), str(RUNTIME_TESTS)])


def _wait_for_ports(path: Path, process: subprocess.Popen[bytes]) -> dict[str, int]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if path.exists():
            ports: dict[str, int] = json.loads(path.read_text())
            return ports
        if process.poll() is not None:
            raise RuntimeError(f"agent exited with {process.returncode}")
        time.sleep(0.05)
    raise TimeoutError(f"agent wrote no {path.name} in 30 s")


@contextmanager
def agent_processes(folder: Path) -> Iterator[list[AgentProcess]]:
    """Two agent processes on loopback, ports chosen by the agents (port 0); stopped after."""
    env = {**os.environ, "PYTHONPATH": _plugin_path(folder / "plugin")}
    started = []
    for name in AGENT_NAMES:
        command = [sys.executable, "-m", "fwbench.runtime.cli", "--plugin", "fake"]
        command += ["--name", name, "--ports-file", str(folder / f"{name}.json")]
        command += ["--exit-with-parent", str(os.getpid())]
        started.append((name, subprocess.Popen(command, env=env)))
    try:
        handles = []
        for name, process in started:
            ports = _wait_for_ports(folder / f"{name}.json", process)
            handles.append(AgentProcess(name, process, ports["grpc"], ports["metrics"]))
        yield handles
    finally:
        for _, process in started:
            process.terminate()
        for _, process in started:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()


def run_workload(agent: AgentProcess) -> None:
    """A fake gemm of 200 us steps, TIMED_ITERATIONS of them timed."""
    request = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params={"m": 200},
        warmup_iterations=1,
        min_iterations=TIMED_ITERATIONS,
        min_seconds=0.0,
    )
    with grpc.insecure_channel(f"127.0.0.1:{agent.grpc_port}") as channel:
        stub = agent_pb2_grpc.AgentServiceStub(channel)
        assert list(stub.Run(request, timeout=30))[-1].result.sample_nanoseconds
