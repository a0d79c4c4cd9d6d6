"""A bounded, seeded fuzz run against a real agent (numpy-cpu: a real gemm, a small
environment): a few thousand random requests (fuzz_requests.py) from a few concurrent callers,
within a hard time cap. Every reply is a well-formed one or a status the protocol lists for
that case (agent.proto), never UNKNOWN or INTERNAL; the agent keeps serving; and a valid Run
afterwards measures as a valid Run before the fuzz did. On failure the seed is printed:
FWBENCH_FUZZ_SEED=SEED replays the same requests (the interleaving of callers may differ)."""

from __future__ import annotations

import os
import random
import threading
import time

import grpc
import pytest
from fuzz_requests import cancel_request, garbage, run_request

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.validate import check_result
from fwbench.spec import load_catalogue

SEED = int(os.environ.get("FWBENCH_FUZZ_SEED", "20261123"))
REQUESTS = 5000  # in all, over the callers
CALLERS = 3
TIME_CAP_SECONDS = 120.0
CALL_TIMEOUT_SECONDS = 30.0
ALLOWED = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
CHECK = agent_pb2.RunRequest(
    run_id="check",
    workload="gemm",
    phase=agent_pb2.PHASE_INFER,
    batch_size=1,
    dtype=agent_pb2.DTYPE_FLOAT32,
    params={"m": 256, "n": 256, "k": 256},
    min_iterations=20,
    max_iterations=20,
    warmup_iterations=2,
    min_seconds=0.0,
    threads=1,  # BLAS threads that wait on each other on a busy machine make no comparison
)

pytestmark = pytest.mark.agent


class Caller:
    """One caller's share of the fuzz: its own channel, its own random stream, and the list
    of replies that broke the rules."""

    def __init__(self, address: str, index: int, deadline: float) -> None:
        self.rng = random.Random(SEED * 100 + index)
        self.channel = grpc.insecure_channel(address)
        self.stub = agent_pb2_grpc.AgentServiceStub(self.channel)
        self.deadline = deadline
        self.catalogue = load_catalogue()
        self.sent = 0
        self.codes: dict[str, int] = {}
        self.broken: list[str] = []

    def work(self, requests: int) -> None:
        try:
            for number in range(requests):
                if time.monotonic() > self.deadline:
                    return
                kind = self.rng.random()
                self.sent += 1
                try:
                    if kind < 0.6:
                        self.run(run_request(self.rng))
                    elif kind < 0.8:
                        self.raw(*garbage(self.rng))
                    elif kind < 0.9:
                        self.cancel(cancel_request(self.rng))
                    else:
                        self.describe()
                except grpc.RpcError as error:
                    self.status(error, f"request {number}")
        finally:
            self.channel.close()

    def status(self, error: grpc.RpcError, what: str) -> None:
        code = error.code()
        self.codes[code.name] = self.codes.get(code.name, 0) + 1
        if code not in ALLOWED:
            self.broken.append(f"{what}: {code.name} {error.details()!r}")

    def run(self, request: agent_pb2.RunRequest) -> None:
        events = list(self.stub.Run(request, timeout=CALL_TIMEOUT_SECONDS))
        self.codes["OK"] = self.codes.get("OK", 0) + 1
        *progress, last = events or [agent_pb2.RunResponse()]
        if not last.HasField("result") or any(e.HasField("result") for e in progress):
            self.broken.append(f"Run {request}: not one RunResult at the end: {events}")
            return
        run_id = request.run_id or last.result.run_id
        if not run_id or any(e.progress.run_id != run_id for e in progress):
            self.broken.append(f"Run {request}: progress of another run id")
        echoed = agent_pb2.RunRequest()
        echoed.CopyFrom(request)
        echoed.run_id = run_id
        try:
            check_result(echoed, last.result, self.catalogue)
        except ValueError as error:
            self.broken.append(f"Run {request}: {error}")

    def raw(self, method: str, payload: bytes) -> None:
        if method.endswith("/Run"):
            call = self.channel.unary_stream(method)
            list(call(payload, timeout=CALL_TIMEOUT_SECONDS))
        else:
            self.channel.unary_unary(method)(payload, timeout=CALL_TIMEOUT_SECONDS)
        self.codes["OK"] = self.codes.get("OK", 0) + 1  # bytes that happen to parse

    def cancel(self, request: agent_pb2.CancelRequest) -> None:
        reply = self.stub.Cancel(request, timeout=CALL_TIMEOUT_SECONDS)
        if request.run_id and reply.run_id != request.run_id:
            self.broken.append(f"Cancel {request}: answers {reply.run_id!r}")

    def describe(self) -> None:
        reply = self.stub.Describe(agent_pb2.DescribeRequest(), timeout=CALL_TIMEOUT_SECONDS)
        if reply.identity.name != "numpy-cpu" or not reply.workloads:
            self.broken.append(f"Describe: {reply}")


def _fastest_ns(handle: AgentHandle) -> int:
    """The fastest sample of a fixed, valid gemm (the least disturbed by other work)."""
    result = [e for e in handle.client.run(CHECK, 60) if e.HasField("result")][-1].result
    check_result(CHECK, result, load_catalogue())
    assert result.settings.intra_op_threads == 1
    return min(result.sample_nanoseconds)


def _back_to_back(handle: AgentHandle, count: int) -> list[str]:
    """One caller alone, a Run as soon as the last one answered: none may find the agent
    busy (it is free once it has sent a result). Returns the refusals."""
    quick = agent_pb2.RunRequest(
        workload="gemm",
        phase=agent_pb2.PHASE_INFER,
        batch_size=1,
        params={"m": 8, "n": 8, "k": 8},
        min_iterations=1,
        max_iterations=1,
        warmup_iterations=0,
        min_seconds=0.0,
        threads=1,
    )
    refused = []
    for number in range(count):
        quick.run_id = f"alone-{number}"
        try:
            list(handle.client.run(quick, CALL_TIMEOUT_SECONDS))
        except grpc.RpcError as error:
            refused.append(f"Run {number}: {error.code().name} {error.details()}")
    return refused


def test_a_fuzzed_agent_answers_by_the_protocol_and_keeps_measuring(
    numpy_agent: AgentHandle,
) -> None:
    print(f"fuzz seed {SEED} (replay: FWBENCH_FUZZ_SEED={SEED})")
    before = _fastest_ns(numpy_agent)
    started = time.monotonic()
    callers = [
        Caller(numpy_agent.address, index, started + TIME_CAP_SECONDS) for index in range(CALLERS)
    ]
    threads = [
        threading.Thread(target=caller.work, args=(REQUESTS // CALLERS,)) for caller in callers
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIME_CAP_SECONDS + CALL_TIMEOUT_SECONDS + 10)
    elapsed = time.monotonic() - started
    codes: dict[str, int] = {}
    for caller in callers:
        for code, count in caller.codes.items():
            codes[code] = codes.get(code, 0) + count
    sent = sum(caller.sent for caller in callers)
    print(f"fuzz seed {SEED}: {sent} requests in {elapsed:.1f} s: {sorted(codes.items())}")
    broken = [line for caller in callers for line in caller.broken]
    assert not broken, f"seed {SEED}: {len(broken)} replies broke the protocol: {broken[:5]}"
    assert not any(thread.is_alive() for thread in threads), f"seed {SEED}: a call hung"
    assert sent >= 1000, f"seed {SEED}: only {sent} requests within the cap"
    assert numpy_agent.alive() and numpy_agent.client.healthy(), f"seed {SEED}: agent down"
    assert numpy_agent.client.describe().identity.name == "numpy-cpu"
    assert _back_to_back(numpy_agent, 200) == [], f"seed {SEED}"
    after = _fastest_ns(numpy_agent)
    # The same gemm before and after: on a shared machine timings wander, but not 10x.
    assert after < 10 * before and before < 10 * after, (SEED, before, after)
