"""Bytes that are not a request are the caller's error (INVALID_ARGUMENT, never INTERNAL), and
an agent that has answered a Run is free for the next one (handlers.py, service.py)."""

from __future__ import annotations

import gc

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2

NOT_A_MESSAGE = b"\xff\xff\xff\xff"  # a field header whose varint never ends


@pytest.mark.parametrize(
    ("method", "message"),
    [("Run", "RunRequest"), ("Describe", "DescribeRequest"), ("Cancel", "CancelRequest")],
)
def test_bytes_that_do_not_parse_are_invalid_argument(
    channel: grpc.Channel, method: str, message: str
) -> None:
    path = f"/fwbench.agent.v1.AgentService/{method}"
    with pytest.raises(grpc.RpcError) as caught:
        if method == "Run":
            list(channel.unary_stream(path)(NOT_A_MESSAGE, timeout=10))
        else:
            channel.unary_unary(path)(NOT_A_MESSAGE, timeout=10)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"the request is not a valid {message}" in caught.value.details()


def test_a_request_that_parses_still_works_through_the_raw_path(channel: grpc.Channel) -> None:
    raw = channel.unary_unary("/fwbench.agent.v1.AgentService/Describe")
    reply = agent_pb2.DescribeResponse.FromString(raw(b"", timeout=10))
    assert reply.identity.name == "fake-cpu"


def test_the_next_run_right_after_a_result_is_never_refused(stub: object) -> None:
    quick = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params={"m": 1},
        warmup_iterations=0,
        min_iterations=1,
        max_iterations=1,
        min_seconds=0.0,
    )
    # The agent's process freezes what it made at its start (runtime/cli.py); here that is the
    # test process's heap, which each run's collection would otherwise walk (0.4 CPU-s a run).
    gc.freeze()
    try:
        for number in range(100):
            quick.run_id = f"next-{number}"
            events = list(stub.Run(quick, timeout=10))  # type: ignore[attr-defined]
            assert events[-1].result.run_id == quick.run_id
    finally:
        gc.unfreeze()
