"""A cell the agent refuses (execute.py): UNIMPLEMENTED is unsupported, with the agent's
reason; FAILED_PRECONDITION for another caller's run fails the cell and the agent's remaining
cells as AGENT_BUSY at once, with no further Run; for this run's own earlier cell, still
stopping, the cell waits (shown) and then runs. Fake agents, no processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run import execute
from fwbench.collector.run.context import RunContext
from fwbench.collector.run.execute import run_all
from fwbench.collector.run.plan import build_selection, plan_cells
from fwbench.collector.run.session import run_status
from fwbench.collector.run.work import AgentWork
from fwbench.spec import load_catalogue
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

CATALOGUE = load_catalogue()


class Refusal(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@dataclass
class FakeClient:
    """Refuses the Runs whose workload is in `refusals` (each refusal used once when `once`)."""

    refusals: dict[str, Refusal]
    once: bool = False
    calls: list[str] = field(default_factory=list)

    def run(self, request: agent_pb2.RunRequest, timeout: float | None) -> Iterator[Any]:
        self.calls.append(request.workload)
        refusal = self.refusals.get(request.workload)
        if refusal is not None:
            if self.once:
                del self.refusals[request.workload]
            raise refusal
        started = time.time_ns()
        yield agent_pb2.RunResponse(
            result=agent_pb2.RunResult(
                run_id=request.run_id,
                sample_nanoseconds=[1_000_000] * 10,
                measure_started_unix_nanoseconds=started,
                measure_ended_unix_nanoseconds=started + 10_000_000,
            )
        )

    def healthy(self) -> bool:
        return True

    def cancel(self, run_id: str = "") -> bool:
        return False


@dataclass
class Display:
    progress: list[str] = field(default_factory=list)

    def cell_started(self, *_: Any) -> None:
        pass

    def cell_progress(self, agent: str, stage: str, iterations: int) -> None:
        self.progress.append(stage)

    def cell_finished(self, *_: Any) -> None:
        pass

    def note(self, *_: Any) -> None:
        pass


@dataclass
class Recorder:
    rows: list[dict[str, Any]] = field(default_factory=list)

    def record(self, row: dict[str, Any], *_: Any) -> None:
        self.rows.append(row)


def sweep(client: FakeClient, display: Display | None = None) -> list[dict[str, Any]]:
    selection = build_selection(
        CATALOGUE, workloads="gemm,conv2d,lenet", phases="infer", batch_sizes="1"
    )
    describe = agent_pb2.DescribeResponse(
        identity=agent_pb2.AgentIdentity(name="a", framework="fake"),
        workloads=[
            agent_pb2.WorkloadSupport(
                name=name, phases=[PHASE_VALUES["infer"]], dtypes=[DTYPE_VALUES["float32"]]
            )
            for name in ("gemm", "conv2d", "lenet")
        ],
    )
    handle = AgentHandle(Instance("a"), "fake:0", client)  # type: ignore[arg-type]
    item = AgentWork(handle, describe, plan_cells("a", describe, CATALOGUE, selection))
    recorder = Recorder()
    ctx = RunContext("run-7", CATALOGUE, selection, recorder, display or Display(), None)  # type: ignore[arg-type]
    run_all([item], ctx)
    return recorder.rows


def test_a_cell_the_agent_cannot_run_is_unsupported_with_its_reason() -> None:
    reason = "torch cannot train resnet18 at batch size 1 with image_size 32: its BatchNorm ..."
    rows = sweep(FakeClient({"conv2d": Refusal(grpc.StatusCode.UNIMPLEMENTED, reason)}))
    assert [r["status"] for r in rows] == ["ok", "unsupported", "ok"]
    assert (rows[1]["error_code"], rows[1]["error"]) == ("UNIMPLEMENTED", reason)
    assert run_status({"ok": 2, "unsupported": 1}, 3, False, "") == "ok"


@pytest.mark.parametrize("said", ["Method not found!", "Method not implemented!"])
def test_an_agent_without_a_run_method_fails_its_cells(said: str) -> None:
    """gRPC's own UNIMPLEMENTED is no reason of the framework's: a failure, never a run that
    exits 0 having measured nothing."""
    rows = sweep(FakeClient({"conv2d": Refusal(grpc.StatusCode.UNIMPLEMENTED, said)}))
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]


def test_another_callers_run_fails_the_agents_cells_at_once_without_another_run() -> None:
    busy = "agent is busy with run theirs-3; it measures one workload at a time"
    client = FakeClient({"gemm": Refusal(grpc.StatusCode.FAILED_PRECONDITION, busy)})
    started = time.monotonic()
    rows = sweep(client)
    assert time.monotonic() - started < 1.0  # no waiting
    assert client.calls == ["gemm"]  # the other caller's sweep is never cut into
    assert [(r["status"], r["error_code"]) for r in rows] == [("failed", "AGENT_BUSY")] * 3
    said = f"agent busy: a is measuring another caller's run (the agent says: {busy})"
    assert rows[0]["error"].startswith(f"{said}; this run leaves the agent to that caller")
    assert "the agent's remaining cells are not measured" in rows[0]["error"]
    assert rows[1]["error"] == rows[2]["error"] == f"not run: {said}"


def test_this_runs_own_cell_still_stopping_is_waited_for_visibly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(execute.time, "sleep", lambda seconds: None)
    own = "agent is busy with run run-7-0; it measures one workload at a time"
    client = FakeClient({"conv2d": Refusal(grpc.StatusCode.FAILED_PRECONDITION, own)}, once=True)
    display = Display()
    rows = sweep(client, display)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert client.calls == ["gemm", "conv2d", "conv2d", "lenet"]
    assert execute.STOPPING in display.progress
