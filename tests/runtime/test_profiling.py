"""Profiles on the runtime's side (protocol 1.10), over a real gRPC server with the fake plugin,
whose profiler splits each step into operations of shares the test chooses: after the timed
loop the cell's steps run under the profiler and come back per step, each name once, classed
by the common mapping; the timed samples are all taken before; Describe names the profiler,
or says why there is none; a plugin without one, or whose profiler fails, answers with
not_profiled and its samples; steps out of range are refused naming "profile.steps"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from fake_plugin import FakePlugin

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime.server import AgentServer, create_server

SHARES = "matmul=0.5,elementwise=0.25,fake_thing=0.125"
MICROS = 4000  # gemm's m: each step sleeps 4 ms


def _stub(monkeypatch: pytest.MonkeyPatch, **env: str) -> Iterator[agent_pb2_grpc.AgentServiceStub]:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server: AgentServer = create_server(FakePlugin(), name="fake-cpu", variant="cpu")
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)
    server.stop(0)


@pytest.fixture
def profiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[agent_pb2_grpc.AgentServiceStub]:
    yield from _stub(monkeypatch, FAKE_PROFILE=SHARES)


def _run(
    stub: agent_pb2_grpc.AgentServiceStub, steps: int, trace_dir: str = ""
) -> tuple[agent_pb2.RunResult, list[agent_pb2.Progress]]:
    request = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params={"m": MICROS},
        warmup_iterations=0,
        min_iterations=3,
        max_iterations=3,
        min_seconds=0,
        profile=agent_pb2.ProfileRequest(steps=steps, trace_dir=trace_dir),
    )
    progress, result = [], None
    for event in stub.Run(request, timeout=30):
        if event.HasField("result"):
            result = event.result
        else:
            progress.append(event.progress)
    assert result is not None
    return result, progress


def test_the_steps_after_the_loop_come_back_per_step_and_classed(profiled, tmp_path: Path):
    assert profiled.Describe(agent_pb2.DescribeRequest()).profiler == "fake profiler 1.0"
    result, progress = _run(profiled, 4, str(tmp_path / "traces"))
    profile = result.profile
    assert not profile.not_profiled and profile.profiler == "fake profiler 1.0"
    assert profile.steps == 4 and len(result.sample_nanoseconds) == 3
    # The profiled steps sleep as the timed ones do: their wall time is a step's, or more.
    assert profile.step_nanoseconds >= MICROS * 1000
    operations = {o.name: o for o in profile.operations}
    assert [o.name for o in profile.operations] == [
        "fake::matmul",
        "fake::elementwise",
        "fake::fake_thing",
    ]  # largest first
    assert operations["fake::matmul"].self_nanoseconds == pytest.approx(MICROS * 500, rel=1e-3)
    assert all(o.calls == 1 for o in profile.operations)  # per step
    classes = {o.name: o.op_class for o in profile.operations}
    assert classes == {
        "fake::matmul": "matmul",
        "fake::elementwise": "elementwise",
        "fake::fake_thing": "",
    }
    # The stages: the timed loop ends before the profile begins, which counts its steps.
    stages = [p.stage for p in progress]
    assert stages.index(agent_pb2.STAGE_PROFILE) > max(
        i for i, s in enumerate(stages) if s == agent_pb2.STAGE_MEASURE
    )
    assert max(p.iterations_done for p in progress if p.stage == agent_pb2.STAGE_PROFILE) == 4
    trace = Path(profile.trace_file)
    assert trace.parent == tmp_path / "traces" and profile.trace_format == "chrome-trace"
    assert len(json.loads(trace.read_text())["traceEvents"]) == 3


def test_a_run_without_profile_has_none_and_steps_out_of_range_are_refused(profiled):
    result, progress = _run(profiled, 0)
    assert not result.HasField("profile")
    assert agent_pb2.STAGE_PROFILE not in {p.stage for p in progress}
    with pytest.raises(grpc.RpcError) as refused:
        _run(profiled, 1001)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "profile.steps=1001 is out of range: allowed 0..1000" in refused.value.details()


def test_no_profiler_or_a_failing_one_answers_why_and_keeps_the_samples(monkeypatch):
    for stub in _stub(monkeypatch, FAKE_NO_PROFILER="no profiler in this build"):
        assert stub.Describe(agent_pb2.DescribeRequest()).no_profiler == "no profiler in this build"
        result, _ = _run(stub, 2)
        assert result.profile.not_profiled == "no profiler in this build"
        assert len(result.sample_nanoseconds) == 3
    for stub in _stub(monkeypatch, FAKE_PROFILE=SHARES, FAKE_PROFILE_FAILS="1"):
        result, _ = _run(stub, 2)
        said = "the profiler failed: the fake profiler failed, as asked"
        assert (
            result.profile.not_profiled == said and result.profile.profiler == "fake profiler 1.0"
        )
        assert len(result.sample_nanoseconds) == 3
