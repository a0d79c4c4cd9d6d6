"""The torch-cpu agent as a real process, over real gRPC: describe, run, cancel, health and
every error status of the protocol."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from stepped_models import full_marks

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
QUICK = {"warmup_iterations": 0, "min_iterations": 1, "min_seconds": 0.0}
SMALL_PARAMS = {
    "gemm": {"m": 64, "n": 64, "k": 64},
    "conv2d": {"channels_in": 8, "channels_out": 8, "height": 16, "width": 16},
    "lstm": {"seq_len": 16},
    "attention": {"heads": 2, "seq_len": 16, "head_dim": 8},
}
# The transformers at a small shape (each takes the parameters it has).
_TRANSFORMER = {"layers": 1, "hidden": 32, "heads": 2, "vocab": 64, "context": 32, "seq_len": 8}
for _name in ("bert", "gpt", "generate"):
    _own = CATALOGUE.get(_name).params
    SMALL_PARAMS[_name] = {k: v for k, v in _TRANSFORMER.items() if k in _own}
SMALL_PARAMS["generate"] |= {"prompt_len": 4, "new_tokens": 3}


def small_request(workload: str, phase: int, **fields) -> agent_pb2.RunRequest:
    params = SMALL_PARAMS.get(
        workload, {"image_size": 32} if "image_size" in CATALOGUE.get(workload).params else {}
    )
    return agent_pb2.RunRequest(
        workload=workload, phase=phase, batch_size=2, params=params, **{**QUICK, **fields}
    )


def result_of(client: AgentClient, req: agent_pb2.RunRequest, timeout: float = 300):
    events = list(client.run(req, timeout))
    assert events[-1].HasField("result")
    return events[-1].result


def test_torch_agent_describes_itself(torch_agent):
    reply = torch_agent.client.describe()
    assert reply.identity.framework == "torch"
    assert reply.identity.framework_version.startswith("2.13.0")
    assert reply.identity.variant == "cpu"
    assert reply.libraries["blas"] and reply.libraries["onednn"]
    assert reply.environment["FWBENCH_DEVICE"] == "cpu"
    assert [d.kind for d in reply.devices] == [agent_pb2.DEVICE_KIND_CPU]
    # Every workload but the collectives, which need a world (tests/distributed).
    alone = {name for name, w in CATALOGUE.workloads.items() if w.kind != "collective"}
    assert {w.name for w in reply.workloads} == alone


PHASES = {"train": agent_pb2.PHASE_TRAIN, "infer": agent_pb2.PHASE_INFER}
# Every workload in each phase the catalogue gives it (generate: inference only).
# (The models whose blocks others repeat in `make test-full`: tests/stepped_models.py.)
BENCHMARKS = [
    pytest.param(name, PHASES[phase], marks=full_marks(name))
    for name, w in CATALOGUE.workloads.items()
    if w.kind not in ("accuracy", "collective")
    for phase in w.phases
]


@pytest.mark.parametrize(("workload", "phase"), BENCHMARKS)
def test_torch_agent_runs_every_catalogue_workload(torch_agent, workload, phase):
    result = result_of(torch_agent.client, small_request(workload, phase))
    assert len(result.sample_nanoseconds) == 1 and result.sample_nanoseconds[0] > 0
    assert result.settings.device == "cpu"
    assert result.settings.dtype == agent_pb2.DTYPE_FLOAT32


# Training to accuracy runs in every framework's default mode through the collector
# (test_frameworks.py), and torch's compiled training in its plugin's tests
# (test_compile_mode_trains_a_model); here both modes through this agent, in `make test-full`
# (compiled: 45 s of CPU on an AMD EPYC family 25, for a path those two already take).
@pytest.mark.full
@pytest.mark.parametrize("mode", ["compile", "eager"])
def test_torch_agent_trains_to_accuracy_in_each_mode(torch_agent, mode):
    req = agent_pb2.RunRequest(
        workload="train_to_accuracy",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=32,
        mode=mode,
        params={"max_epochs": 3, "target_accuracy_permille": 1000},
    )
    result = result_of(torch_agent.client, req)
    assert result.settings.mode == mode
    assert result.accuracy.epochs == 3 and not result.accuracy.reached
    assert len(result.sample_nanoseconds) == 2
    assert result.accuracy.history[-1].validation_accuracy > 0.5  # it learns


def test_torch_agent_applies_threads_and_dtype(torch_agent):
    req = small_request("gemm", agent_pb2.PHASE_INFER, threads=1, dtype=agent_pb2.DTYPE_BFLOAT16)
    settings = result_of(torch_agent.client, req).settings
    assert settings.intra_op_threads == 1
    assert settings.dtype == agent_pb2.DTYPE_BFLOAT16


def rpc_error(client: AgentClient, req: agent_pb2.RunRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(client.run(req, 60))
    return caught.value


@pytest.mark.parametrize(
    ("req", "code", "text"),
    [
        (
            agent_pb2.RunRequest(workload="alexnet", phase=1, batch_size=1),
            grpc.StatusCode.NOT_FOUND,
            "unknown workload 'alexnet'",
        ),
        (
            agent_pb2.RunRequest(workload="resnet18", phase=1, batch_size=0),
            grpc.StatusCode.INVALID_ARGUMENT,
            "batch_size=0 is out of range: allowed 1..4096",
        ),
        (
            agent_pb2.RunRequest(
                workload="resnet18", phase=1, batch_size=1, params={"image_size": 33}
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "params.image_size=33 is out of range: allowed 32..512, multiple of 32",
        ),
        (
            agent_pb2.RunRequest(
                workload="gemm", phase=1, batch_size=1, dtype=agent_pb2.DTYPE_FLOAT16
            ),
            grpc.StatusCode.UNIMPLEMENTED,
            "does not support dtype float16",
        ),
    ],
)
def test_torch_agent_refuses_with_precise_status(torch_agent, req, code, text):
    error = rpc_error(torch_agent.client, req)
    assert error.code() == code
    assert text in error.details()


def test_torch_agent_out_of_memory_is_resource_exhausted(
    torch_env, tmp_path, agent_process_starter
):
    limit = 8 * 1024**3
    _, port = agent_process_starter(torch_env, tmp_path, f"--memory-limit-bytes={limit}")
    client = AgentClient("torch-cpu", f"127.0.0.1:{port}")
    try:
        client.wait_healthy(60)
        req = agent_pb2.RunRequest(
            workload="gemm",
            phase=agent_pb2.PHASE_INFER,
            batch_size=1,
            dtype=agent_pb2.DTYPE_FLOAT64,
            params={"m": 32768, "n": 32768, "k": 32768},
            **QUICK,
        )
        error = rpc_error(client, req)  # one 8 GiB matrix cannot fit an 8 GiB address space
        assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "out of memory" in error.details()
        assert result_of(client, small_request("gemm", agent_pb2.PHASE_INFER))  # still usable
    finally:
        client.close()


def start_long_run(client: AgentClient, run_id: str):
    req = agent_pb2.RunRequest(
        workload="resnet18",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=4,
        params={"image_size": 64},
        run_id=run_id,
        warmup_iterations=0,
        min_seconds=600.0,
    )
    stream = client.run(req, 120)
    measuring = threading.Event()
    outcome: dict[str, object] = {}

    def consume():
        try:
            for event in stream:
                if event.progress.stage == agent_pb2.STAGE_MEASURE:
                    measuring.set()
        except grpc.RpcError as error:
            outcome["code"] = error.code()
            outcome["at"] = time.monotonic()
        measuring.set()

    thread = threading.Thread(target=consume)
    thread.start()
    assert measuring.wait(120)
    return thread, outcome


def wait_until_idle(client: AgentClient, within_seconds: float) -> None:
    end = time.monotonic() + within_seconds
    while True:
        try:
            result_of(client, small_request("gemm", agent_pb2.PHASE_INFER))
            return
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.FAILED_PRECONDITION or time.monotonic() > end:
                raise
            time.sleep(0.1)


def test_torch_agent_refuses_concurrent_run_and_cancel_stops_work(torch_agent):
    client = torch_agent.client
    thread, outcome = start_long_run(client, "long-run")
    error = rpc_error(client, small_request("gemm", agent_pb2.PHASE_INFER))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "busy with run long-run" in error.details()
    asked = time.monotonic()
    assert client.cancel("long-run")
    thread.join(30)
    assert outcome["code"] == grpc.StatusCode.CANCELLED
    assert outcome["at"] - asked < 10  # stopped at the next iteration, not after 600 s
    wait_until_idle(client, 10)


def test_torch_agent_deadline_stops_work(torch_agent):
    client = torch_agent.client
    req = agent_pb2.RunRequest(
        workload="resnet18",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=4,
        params={"image_size": 64},
        min_seconds=600.0,
    )
    with pytest.raises(grpc.RpcError) as caught:
        list(client.run(req, 3.0))
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    wait_until_idle(client, 10)


def test_torch_agent_health_is_serving(torch_agent):
    assert torch_agent.client.healthy()
