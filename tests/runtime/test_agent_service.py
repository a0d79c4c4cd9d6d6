"""The runtime's AgentService over a real gRPC socket, with a framework-free plugin."""

from __future__ import annotations

import itertools
import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.plugin import PluginContext
from fwbench.runtime.registry import PluginNotFound, load_plugin
from fwbench.spec import SPEC_VERSION

FAST = {"warmup_iterations": 1, "min_iterations": 3, "min_seconds": 0.0}


def request(workload="gemm", phase=agent_pb2.PHASE_INFER, batch_size=1, **fields):
    return agent_pb2.RunRequest(
        workload=workload, phase=phase, batch_size=batch_size, **{**FAST, **fields}
    )


def run_to_end(stub, req, timeout=30):
    events = list(stub.Run(req, timeout=timeout))
    return events[:-1], events[-1].result


def rpc_error(stub, req) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        run_to_end(stub, req)
    return caught.value


def test_describe_reports_identity_version_and_limits(stub, agent):
    reply = stub.Describe(agent_pb2.DescribeRequest(), timeout=5)
    assert reply.spec_version == SPEC_VERSION
    assert (reply.identity.name, reply.identity.framework, reply.identity.variant) == (
        "fake-cpu",
        "fake",
        "cpu",
    )
    assert reply.libraries["blas"] == "none"
    assert reply.environment["FAKE_SWITCH"] == "on"
    assert reply.host.logical_cores >= 1 and reply.host.cpu_model
    assert reply.metrics_port == agent.metrics_port > 0
    gemm = next(w for w in reply.workloads if w.name == "gemm")
    assert gemm.max_batch_size == 1024
    limits = {p.name: (p.min_value, p.max_value, p.default_value) for p in gemm.params}
    assert limits["m"] == (1, 32768, 2048)


def test_run_streams_progress_then_every_raw_sample(stub):
    progress, result = run_to_end(stub, request(params={"m": 200}, min_iterations=5))
    stages = list(dict.fromkeys(e.progress.stage for e in progress))
    assert stages == [
        agent_pb2.STAGE_BUILD,
        agent_pb2.STAGE_FIRST_ITERATION,
        agent_pb2.STAGE_WARMUP,
        agent_pb2.STAGE_MEASURE,
    ]
    assert len(result.sample_nanoseconds) == 5
    assert all(s >= 200_000 for s in result.sample_nanoseconds)  # each step sleeps 200 µs
    assert result.first_iteration_nanoseconds >= 200_000
    assert result.warmup_iterations == 1
    assert dict(result.settings.params) == {"m": 200, "n": 2048, "k": 2048}
    assert result.settings.extra["fake"] == "yes"
    assert result.measure_ended_unix_nanoseconds > result.measure_started_unix_nanoseconds


def test_run_unknown_workload_is_not_found(stub):
    error = rpc_error(stub, request(workload="alexnet"))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "alexnet" in error.details() and "resnet18" in error.details()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"batch_size": 0}, "batch_size=0 is out of range: allowed 1..1024"),
        ({"batch_size": 1025}, "batch_size=1025 is out of range: allowed 1..1024"),
        ({"params": {"m": 0}}, "params.m=0 is out of range: allowed 1..32768"),
        ({"params": {"depth": 3}}, "unknown parameter 'depth'"),
        ({"warmup_iterations": 10001}, "warmup_iterations=10001"),
        ({"min_seconds": -1.0}, "min_seconds=-1.0"),
        ({"phase": agent_pb2.PHASE_UNSPECIFIED}, "phase"),
        ({"threads": 5000}, "threads=5000"),
    ],
)
def test_run_bad_parameter_is_invalid_argument_naming_field_and_range(stub, fields, named):
    error = rpc_error(stub, request(**fields))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in error.details()


@pytest.mark.parametrize(
    "fields",
    [
        {"workload": "resnet18"},  # in the catalogue, not in this plugin
        {"workload": "lenet", "phase": agent_pb2.PHASE_TRAIN},
        {"dtype": agent_pb2.DTYPE_FLOAT16},
        {"mode": "turbo"},
        {"workload": "lenet", "mode": "compiled"},  # refused by the plugin's build
    ],
)
def test_run_unsupported_is_unimplemented(stub, fields):
    assert rpc_error(stub, request(**fields)).code() == grpc.StatusCode.UNIMPLEMENTED


def test_run_out_of_memory_is_resource_exhausted(stub):
    error = rpc_error(stub, request(params={"m": 31000}))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "1 PiB" in error.details()


def start_long_run(stub, run_id: str):
    """A run of 20 ms steps for up to an hour, started on a thread; returns once measuring."""
    call = stub.Run(request(run_id=run_id, params={"m": 20000}, min_seconds=3600.0), timeout=60)
    measuring = threading.Event()
    outcome: dict[str, object] = {}

    def consume():
        try:
            for event in call:
                if event.progress.stage == agent_pb2.STAGE_MEASURE:
                    measuring.set()
        except grpc.RpcError as error:
            outcome["code"] = error.code()
        measuring.set()

    thread = threading.Thread(target=consume)
    thread.start()
    assert measuring.wait(10)
    return call, thread, outcome


def wait_until_idle(stub, deadline_seconds=10.0):
    """The agent accepts a new run again (it refuses while busy)."""
    end = time.monotonic() + deadline_seconds
    while True:
        try:
            return run_to_end(stub, request(params={"m": 10}))
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > end:
                raise
            time.sleep(0.05)


def test_run_while_busy_is_refused_then_cancel_stops_the_first(stub):
    _, thread, outcome = start_long_run(stub, "long-1")
    error = rpc_error(stub, request())
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "busy with run long-1" in error.details()
    reply = stub.Cancel(agent_pb2.CancelRequest(run_id="long-1"), timeout=5)
    assert reply.cancelled
    thread.join(5)
    assert outcome["code"] == grpc.StatusCode.CANCELLED
    wait_until_idle(stub, 2.0)


def test_cancel_of_another_run_id_changes_nothing(stub):
    assert not stub.Cancel(agent_pb2.CancelRequest(run_id="nothing"), timeout=5).cancelled


def test_client_cancelling_the_call_stops_the_work(stub):
    call, thread, _ = start_long_run(stub, "long-2")
    call.cancel()
    thread.join(5)
    wait_until_idle(stub, 2.0)


def test_deadline_stops_the_work(stub):
    req = request(params={"m": 20000}, min_seconds=3600.0)
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Run(req, timeout=0.5))
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until_idle(stub, 2.0)


def test_health_reports_serving_for_server_and_service(channel, agent):
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "fwbench.agent.v1.AgentService"):
        reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    agent.health.enter_graceful_shutdown()
    reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


def test_reflection_is_served_by_default_and_can_be_turned_off():
    from fwbench.runtime.cli import build_parser

    assert build_parser().parse_args(["--plugin", "fake"]).reflection is True
    assert build_parser().parse_args(["--plugin", "fake", "--no-reflection"]).reflection is False


def test_reflection_lists_the_agent_service(channel):
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    replies = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
    )
    names = {s.name for r in replies for s in r.list_services_response.service}
    assert {"fwbench.agent.v1.AgentService", "grpc.health.v1.Health"} <= names


def test_metrics_expose_process_identity_and_workload_counters(stub, agent):
    run_to_end(stub, request(params={"m": 10}, min_iterations=4))
    body = (
        urllib.request.urlopen(f"http://127.0.0.1:{agent.metrics_port}/metrics", timeout=5)
        .read()
        .decode()
    )
    assert "process_cpu_seconds_total" in body
    assert "process_resident_memory_bytes" in body
    assert 'fwbench_agent_info{agent_name="fake-cpu",framework="fake"' in body
    assert 'fwbench_workload_runs_total{status="ok"} 1.0' in body
    counted = [
        line
        for line in body.splitlines()
        if line.startswith('fwbench_workload_iterations_total{phase="infer"')
    ]
    assert counted and float(counted[0].split()[-1]) == 1 + 1 + 4  # first, warm-up, timed


def test_load_plugin_unknown_name_lists_installed():
    with pytest.raises(PluginNotFound, match="no fwbench plugin named 'nope'; installed"):
        load_plugin("nope", PluginContext())


def test_run_sends_heartbeats_while_nothing_new_happens(stub, monkeypatch):
    """Protocol 1.2: a Progress at least every HEARTBEAT_SECONDS, the last one repeated, with
    a growing elapsed time, so that a client can tell a long step from a hung agent."""
    from fwbench.runtime import service

    monkeypatch.setattr(service, "HEARTBEAT_SECONDS", 0.005)
    progress, result = run_to_end(stub, request(params={"m": 20000}, min_iterations=10))
    assert result.sample_nanoseconds
    elapsed = [e.progress.elapsed_seconds for e in progress]
    assert elapsed == sorted(elapsed) and elapsed[-1] > 0
    repeats = sum(
        a.progress.stage == b.progress.stage
        and a.progress.iterations_done == b.progress.iterations_done
        for a, b in itertools.pairwise(progress)
    )
    assert repeats >= 5, [(e.progress.stage, e.progress.iterations_done) for e in progress]
    assert all(e.progress.run_id for e in progress)
