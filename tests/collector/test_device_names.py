"""Which device a row names (run/normalize.py): a measured row names the device its result
says ran it; a row that never ran names the CPU only for an agent that has nothing else (on the
first GPU lease, a cancelled jax-cuda12 cell was labelled with the host's Xeon)."""

from __future__ import annotations

from typing import Any, cast

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.normalize import failure_row, identity_columns, result_row
from fwbench.collector.run.plan import Cell
from fwbench.spec import load_catalogue

CPU = agent_pb2.Device(kind=agent_pb2.DEVICE_KIND_CPU, index=0, name="Intel(R) Xeon(R)")
GPU = agent_pb2.Device(kind=agent_pb2.DEVICE_KIND_GPU, index=0, name="NVIDIA H200")
CELL = Cell("a", "gemm", "infer", 1, "float32", 0, {"m": 8, "n": 8, "k": 8})


def _identity(*devices: agent_pb2.Device) -> tuple[dict[str, Any], agent_pb2.DescribeResponse]:
    describe = agent_pb2.DescribeResponse(devices=list(devices))
    handle = AgentHandle(instance=Instance("a"), address="127.0.0.1:1", client=cast(Any, None))
    return identity_columns("r", 0, handle, describe, CELL, load_catalogue()), describe


def _ran_on(device: str, *devices: agent_pb2.Device) -> str:
    identity, describe = _identity(*devices)
    result = agent_pb2.RunResult(sample_nanoseconds=[1000, 1100, 1200])
    result.settings.device = device
    return str(result_row(identity, describe, 0, result, load_catalogue())["device_name"])


def test_a_cell_that_never_ran_names_no_device_when_the_agent_has_a_gpu() -> None:
    identity, _ = _identity(CPU, GPU)
    assert failure_row(identity, 0, "cancelled", "CANCELLED", "stopped")["device_name"] == ""
    identity, _ = _identity(CPU)
    assert failure_row(identity, 0, "failed", "INTERNAL", "boom")["device_name"] == CPU.name


def test_a_measured_row_names_the_device_its_result_names() -> None:
    assert _ran_on("cuda:0", CPU, GPU) == GPU.name
    assert _ran_on("cpu", CPU, GPU) == CPU.name
    assert _ran_on("cpu", CPU) == CPU.name
