"""A generation workload through the runtime over a real gRPC socket, with the framework-free
plugin: each sample is one whole generation, and its prefill and every decode step come back
timed on their own (GenerationResult), the first iteration's and the warm-up's left out; a
plugin that builds a generation in one piece, or decodes another count than the catalogue's,
fails the cell instead of reporting figures per token that would be wrong."""

from __future__ import annotations

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import BuiltStep, GenerationSteps, Settings
from fwbench.runtime.timing import GenerationTimer

pytestmark = pytest.mark.timing  # it bounds the time between a sample's timed parts

GENERATE = {"prompt_len": 50, "new_tokens": 5, "layers": 1, "hidden": 8, "heads": 2}


def _request(**fields: object) -> agent_pb2.RunRequest:
    loop = {"warmup_iterations": 2, "min_iterations": 3, "min_seconds": 0.0}
    return agent_pb2.RunRequest(
        workload="generate",
        phase=agent_pb2.PHASE_INFER,
        batch_size=2,
        params=GENERATE,
        **{**loop, **fields},
    )


def _result(stub: object, request: agent_pb2.RunRequest) -> agent_pb2.RunResult:
    events = list(stub.Run(request, timeout=30))  # type: ignore[attr-defined]
    return events[-1].result


def test_each_sample_is_a_generation_with_its_parts_timed(stub):
    result = _result(stub, _request())
    parts = result.generation
    assert parts.decode_steps_per_sample == 4  # new_tokens - 1: the prefill makes the first
    assert len(result.sample_nanoseconds) == len(parts.prefill_nanoseconds) == 3
    assert len(parts.decode_step_nanoseconds) == 3 * 4  # timed samples only, not the warm-up
    assert all(p >= 50 * 20_000 for p in parts.prefill_nanoseconds)  # 20 us a prompt token
    assert all(d >= 200_000 for d in parts.decode_step_nanoseconds)
    for i, sample in enumerate(result.sample_nanoseconds):
        inside = parts.prefill_nanoseconds[i] + sum(
            parts.decode_step_nanoseconds[i * 4 : i * 4 + 4]
        )
        assert inside <= sample
        assert sample - inside < 0.2 * sample  # the sample is its parts, little else


def test_other_workloads_carry_no_generation_parts(stub):
    request = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        min_iterations=2,
        warmup_iterations=0,
        min_seconds=0.0,
        params={"m": 10},
    )
    assert not _result(stub, request).HasField("generation")


def test_a_wrong_count_of_decode_steps_fails_the_cell(stub, monkeypatch):
    monkeypatch.setenv("FAKE_DECODE_STEPS_OFF", "1")
    with pytest.raises(grpc.RpcError) as caught:
        _result(stub, _request())
    assert caught.value.code() == grpc.StatusCode.INTERNAL
    assert "decodes 5 steps per generation; the catalogue's generate has 4" in (
        caught.value.details() or ""
    )


def test_a_generation_built_in_one_piece_fails_the_cell(stub, agent, monkeypatch):
    plugin = agent.servicer._plugin  # type: ignore[attr-defined]
    settings = Settings("float32", 1, 1, "eager", "", "cpu")
    monkeypatch.setattr(plugin, "build", lambda spec: BuiltStep(lambda: None, settings))
    with pytest.raises(grpc.RpcError) as caught:
        _result(stub, _request())
    assert "needs its parts" in (caught.value.details() or "")


def test_the_timer_times_each_part_and_forgets_on_reset():
    clock = iter(range(0, 10_000, 10))  # each clock read 10 ns after the last
    calls: list[str] = []
    steps = GenerationSteps(lambda: calls.append("p"), lambda: calls.append("d"), 3)
    timer = GenerationTimer(steps, lambda _: None, lambda: next(clock))
    timer()
    assert calls == ["p", "d", "d", "d"]
    assert timer.prefill_ns == [10] and timer.decode_ns == [10, 10, 10]
    timer.reset()
    assert (timer.prefill_ns, timer.decode_ns) == ([], [])
