"""`collector doctor`: what this host offers each declared agent, told truthfully. The facts
it reads (driver marker, Docker engine, agent environments) are checked against the same
facts read here; a GPU host is a stand-in NVML (tests/runtime/fake_nvml.py), as nothing else
can show one on a machine without a GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from fwbench.collector.agents import host
from fwbench.collector.cli import app

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))  # fake_nvml
from fake_nvml import two_gpus

GPU_AGENTS = {"torch-cu12", "tf-cuda", "jax-cuda12"}


def doctor(*args: str) -> dict[str, Any]:
    done = CliRunner().invoke(app, ["doctor", "--json", *args])
    assert done.exit_code == 0, done.output
    return json.loads(done.output)


def test_doctor_tells_what_this_host_has() -> None:
    report = doctor()
    assert report["host"]["logical_cpus"] == os.cpu_count()
    assert report["host"]["usable_cpus"] == len(os.sched_getaffinity(0))
    driver = any(Path(m).exists() for m in host.NVIDIA_DRIVER_MARKERS)
    assert report["nvidia"]["driver_loaded"] == driver
    agents = {row["agent"]: row for row in report["agents"]}
    assert set(agents) >= GPU_AGENTS and "torch-cpu" in agents
    for name in GPU_AGENTS:
        if not driver:
            assert agents[name]["runs"] is False
            assert "needs an NVIDIA GPU" in agents[name]["local"]
    assert agents["torch-cpu"]["runs"] is True


def test_without_a_docker_engine_agents_still_run_locally() -> None:
    # The real command in its own process: docker-py leaves the socket of a failed connect
    # for the garbage collector, which pytest would report against a later test.
    done = subprocess.run(
        [str(Path(sys.executable).parent / "collector"), "doctor", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "DOCKER_HOST": "unix:///nonexistent/docker.sock"},
        check=True,
    )
    report = json.loads(done.stdout)
    assert (
        "no daemon answers" in report["docker"]["state"]
        or "not installed" in (report["docker"]["state"])
    )
    cpu = next(row for row in report["agents"] if row["agent"] == "numpy-cpu")
    assert cpu["docker"] == "no Docker engine" and cpu["runs"] is True


def test_an_existing_python_without_the_framework_is_reported(tmp_path: Path) -> None:
    # The collector's own interpreter has the runtime's dependencies, not PyTorch.
    report = doctor("--python", f"torch-cpu={sys.executable}")
    torch = next(row for row in report["agents"] if row["agent"] == "torch-cpu")
    assert "torch-cpu cannot run in" in torch["local"] and "pip install torch==" in torch["local"]


def test_gpus_through_nvml_are_listed_and_gpu_agents_can_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = two_gpus()
    module = SimpleNamespace(
        NVMLError=fake.NVMLError,
        nvmlInit=fake.nvmlInit,
        nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "580.65.06",
        nvmlDeviceGetCount=fake.nvmlDeviceGetCount,
        nvmlDeviceGetHandleByIndex=fake.nvmlDeviceGetHandleByIndex,
        nvmlDeviceGetName=fake.nvmlDeviceGetName,
        nvmlDeviceGetMemoryInfo=fake.nvmlDeviceGetMemoryInfo,
    )
    monkeypatch.setitem(sys.modules, "pynvml", module)
    monkeypatch.setattr(host, "nvidia_gpu_present", lambda: True)
    report = doctor()
    nvidia = report["nvidia"]
    assert nvidia["nvml"] == "ok" and nvidia["driver_version"] == "580.65.06"
    assert [d["name"] for d in nvidia["devices"]] == [g.name for g in fake.gpus]
    agents = {row["agent"]: row for row in report["agents"]}
    assert "needs an NVIDIA GPU" not in agents["torch-cu12"]["local"]
    table = CliRunner().invoke(app, ["doctor"])
    assert "NVIDIA H100 80GB HBM3" in table.output and "580.65.06" in table.output
