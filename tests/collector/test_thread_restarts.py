"""AgentWork.ensure_threads: agents that size their thread pools at start-up get a fresh
instance per thread count; others, and attached agents, are never restarted."""

from __future__ import annotations

from dataclasses import dataclass, field

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import Instance
from fwbench.collector.run.work import AgentWork


def _describe(fixed: bool, threads: int = 2) -> agent_pb2.DescribeResponse:
    return agent_pb2.DescribeResponse(
        threads=agent_pb2.ThreadSettings(intra_op_threads=threads, fixed_at_startup=fixed)
    )


@dataclass
class FakeClient:
    threads: int

    def describe(self) -> agent_pb2.DescribeResponse:
        return _describe(True, self.threads or 2)


JAX = Instance("jax-cpu")


@dataclass
class FakeHandle:
    threads: int = 0
    name: str = "jax-cpu"
    instance: Instance = JAX
    stopped: bool = False
    client: FakeClient = field(init=False)

    def __post_init__(self) -> None:
        self.client = FakeClient(self.threads)

    def stop(self, grace_seconds: float = 10.0) -> None:
        self.stopped = True


def test_fixed_agent_is_restarted_once_per_thread_count() -> None:
    started: list[int] = []

    def restart(threads: int) -> FakeHandle:
        started.append(threads)
        return FakeHandle(threads)

    first = FakeHandle()
    work = AgentWork(first, _describe(True), [], restart)  # type: ignore[arg-type]
    assert work.ensure_threads(0) == ""
    assert started == []
    assert work.ensure_threads(1) == ""
    assert work.ensure_threads(1) == ""
    assert started == [1] and first.stopped
    assert work.describe.threads.intra_op_threads == 1
    assert work.ensure_threads(0) == ""  # back to the framework default
    assert started == [1, 0]


def test_flexible_agent_is_never_restarted() -> None:
    def restart(threads: int) -> FakeHandle:
        raise AssertionError("must not restart")

    work = AgentWork(FakeHandle(), _describe(False), [], restart)  # type: ignore[arg-type]
    assert work.ensure_threads(1) == ""


def test_attached_fixed_agent_explains_how_to_start_it() -> None:
    work = AgentWork(FakeHandle(), _describe(True), [], None)  # type: ignore[arg-type]
    reason = work.ensure_threads(4)
    assert "sizes its thread pools at start-up" in reason
    assert "FWBENCH_THREADS=4" in reason
