"""The example agent agents/examples/numpy-gemm as a plain process (no Docker): its stubs made
from agent.proto as its image makes them, then the collector's own client and checks against
it: a Run the collector's validation accepts, the refusals agent.proto prescribes, Cancel
scoped to its caller, one run at a time. tests/docker/test_image_agents.py runs its image."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import psutil
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.run.validate import check_result
from fwbench.spec import SPEC_VERSION, load_catalogue

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "agents" / "examples" / "numpy-gemm"
PROTO = REPO / "proto" / "fwbench" / "agent" / "v1"
# What the agent is started with beside its own switches, as `collector run --agent-env` would
# start it: a variable, and FWBENCH_REPORT_VARIABLES naming it (Describe must report it).
STARTED_WITH = {"EXAMPLE_SWITCH": "on", "FWBENCH_REPORT_VARIABLES": "EXAMPLE_SWITCH"}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    stubs = tmp_path_factory.mktemp("stubs")
    made = subprocess.run(
        [
            *(sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO}", f"--python_out={stubs}"),
            *(f"--grpc_python_out={stubs}", str(PROTO / "agent.proto")),
        ],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(stubs), "GRPC_PORT": str(port)}
    env.update(FWBENCH_THREADS="1", NUMPY_GEMM_CHECK="1", **STARTED_WITH)
    process = subprocess.Popen([sys.executable, str(EXAMPLE / "agent.py")], env=env)
    address = f"127.0.0.1:{port}"
    client = AgentClient("numpy-gemm", address)
    try:
        client.wait_healthy(60, alive=lambda: process.poll() is None)
        yield address
    finally:
        client.close()
        process.terminate()
        assert process.wait(10) == 0  # a clean stop on SIGTERM


def _request(**fields: object) -> agent_pb2.RunRequest:
    values: dict[str, object] = {
        "run_id": os.urandom(8).hex(),
        "workload": "gemm",
        "phase": agent_pb2.PHASE_INFER,
        "batch_size": 2,
        "dtype": agent_pb2.DTYPE_FLOAT64,
        "params": {"m": 32, "n": 16, "k": 8},
        "warmup_iterations": 2,
        "min_iterations": 4,
        "min_seconds": 0.0,
    }
    return agent_pb2.RunRequest(**{**values, **fields})


def test_describe_and_a_run_the_collector_accepts(address: str) -> None:
    client = AgentClient("numpy-gemm", address)
    try:
        described = client.describe()  # refuses another major version of the protocol
        assert described.spec_version == SPEC_VERSION
        assert described.identity.name == "numpy-gemm" and described.identity.framework == "numpy"
        assert described.threads.fixed_at_startup and described.threads.intra_op_threads == 1
        assert described.environment["NUMPY_GEMM_CHECK"] == "1"
        assert [w.name for w in described.workloads] == ["gemm"]
        assert not described.profiler and described.no_profiler  # 1.10: none, and why
        # A profile asked for (1.10) is answered with why there is none, as checked below.
        request = _request(profile=agent_pb2.ProfileRequest(steps=2))
        events = list(client.run(request, timeout_seconds=60))
    finally:
        client.close()
    *progress, last = events
    assert last.HasField("result") and all(e.HasField("progress") for e in progress)
    stages = [e.progress.stage for e in progress]
    assert stages[0] == agent_pb2.STAGE_BUILD and stages[-1] == agent_pb2.STAGE_MEASURE
    assert stages == sorted(stages)
    result = last.result
    check_result(request, result, load_catalogue())  # what the collector checks before storing
    assert len(result.sample_nanoseconds) == 4 and result.warmup_iterations == 2
    assert result.settings.dtype == agent_pb2.DTYPE_FLOAT64
    assert dict(result.settings.params) == {"m": 32, "n": 16, "k": 8}
    assert result.profile.not_profiled == "NumPy has no profiler of its own"


def test_on_a_host_it_listens_on_loopback_alone(address: str) -> None:
    """Started as docs/writing-an-agent.md starts it on a host (no GRPC_HOST: only its image sets
    0.0.0.0), it listens on 127.0.0.1 and nowhere else."""
    client = AgentClient("numpy-gemm", address)
    try:
        pid = client.describe().pid
    finally:
        client.close()
    listening = {  # gRPC listens on a dual-stack socket: 127.0.0.1 as ::ffff:127.0.0.1
        (c.laddr.ip.removeprefix("::ffff:"), c.laddr.port)
        for c in psutil.Process(pid).net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN
    }
    assert listening == {("127.0.0.1", int(address.rsplit(":", 1)[1]))}, listening


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"workload": "conv2d"}, grpc.StatusCode.UNIMPLEMENTED),
        ({"phase": agent_pb2.PHASE_TRAIN}, grpc.StatusCode.UNIMPLEMENTED),
        ({"dtype": agent_pb2.DTYPE_BFLOAT16}, grpc.StatusCode.UNIMPLEMENTED),
        ({"params": {"m": 0}}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"params": {"image_size": 8}}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"batch_size": 1025}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"phase": agent_pb2.PHASE_UNSPECIFIED}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"dtype": 99}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"threads": 1025}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"min_iterations": 5, "max_iterations": 4}, grpc.StatusCode.INVALID_ARGUMENT),
        ({"strategy": "ddp"}, grpc.StatusCode.UNIMPLEMENTED),
        ({"profile": agent_pb2.ProfileRequest(steps=1001)}, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_refusals_carry_the_status_agent_proto_prescribes(
    address: str, fields: dict[str, object], code: grpc.StatusCode
) -> None:
    client = AgentClient("numpy-gemm", address)
    try:
        with pytest.raises(grpc.RpcError) as error:
            list(client.run(_request(**fields), timeout_seconds=30))
    finally:
        client.close()
    assert error.value.code() == code


def test_every_catalogue_workload_but_gemm_is_unimplemented_and_others_not_found(
    address: str,
) -> None:
    """agent.proto: NOT_FOUND for a name in neither the catalogue nor Describe, UNIMPLEMENTED
    for a catalogue workload the agent does not declare: the example's list of catalogue names
    is the catalogue's (allreduce and the transformers included)."""
    client = AgentClient("numpy-gemm", address)
    codes = {}
    try:
        for workload in [*load_catalogue().workloads, "no-such-workload"]:
            if workload != "gemm":
                try:
                    list(client.run(_request(workload=workload), timeout_seconds=30))
                except grpc.RpcError as error:
                    codes[workload] = error.code()
    finally:
        client.close()
    assert codes.pop("no-such-workload") == grpc.StatusCode.NOT_FOUND
    assert "allreduce" in codes and set(codes.values()) == {grpc.StatusCode.UNIMPLEMENTED}, codes


def test_cancel_is_scoped_to_its_caller_and_one_run_at_a_time(address: str) -> None:
    owner, other = AgentClient("numpy-gemm", address), AgentClient("numpy-gemm", address)
    long_run = _request(min_seconds=60.0, max_iterations=10_000_000)

    def start() -> tuple[threading.Thread, list[object]]:
        """The long run in a thread, once its first Progress came (it is under way)."""
        outcome: list[object] = []
        begun = threading.Event()

        def run() -> None:
            try:
                for _ in owner.run(long_run, timeout_seconds=120):
                    begun.set()
            except grpc.RpcError as error:
                outcome.append(error.code())
            begun.set()

        thread = threading.Thread(target=run)
        thread.start()
        assert begun.wait(30) and not outcome, outcome
        return thread, outcome

    thread, outcome = start()
    try:
        with pytest.raises(grpc.RpcError) as busy:  # one run at a time
            list(other.run(_request(), timeout_seconds=30))
        assert busy.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert not other.cancel()  # without an id: only the caller's own run
        assert owner.cancel()
        thread.join(30)
        assert outcome == [grpc.StatusCode.CANCELLED]
        thread, outcome = start()
        assert other.cancel(long_run.run_id)  # by its id: whoever knows it
        thread.join(30)
        assert outcome == [grpc.StatusCode.CANCELLED]
    finally:
        owner.cancel(long_run.run_id)
        thread.join(30)
        owner.close()
        other.close()


def test_the_example_passes_the_conformance_suite(address: str) -> None:
    """`collector conformance` against the running example, every group: what an outsider
    runs on their agent (docs/writing-an-agent.md), here without Docker."""
    done = subprocess.run(
        [
            *(sys.executable, "-m", "fwbench.collector.cli", "conformance", address),
            *("--json", "--agent-env", "EXAMPLE_SWITCH=on"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {c["check"]: c["result"] for c in json.loads(done.stdout)["checks"]}
    assert results["environment reports FWBENCH_REPORT_VARIABLES"] == "pass"
    assert results["heartbeat: a Progress every 2 s for 17 s"] == "pass"
    assert results["busy refusal to another caller: no run id"] == "pass"
    assert results["Cancel without run id from another caller: cancelled false"] == "pass"
