"""A rank of a world, as the runtime sees it: torchrun's variables read and checked, the world
in Describe, strategies offered, and the loop rules every rank must keep (agent.proto 1.3).
The fake plugin stands in for a framework; tests/distributed runs real engines."""

from __future__ import annotations

import os

import grpc
import pytest
from fake_plugin import FakePlugin

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.runtime.plugin import InvalidContext, PluginContext, context_from_environment
from fwbench.runtime.server import create_server
from fwbench.runtime.world import World, pin_cpus, world_from_environment

WORLD = {
    "WORLD_SIZE": "2",
    "RANK": "1",
    "LOCAL_RANK": "1",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29500",
}


def test_torchrun_variables_make_the_world() -> None:
    world = world_from_environment({**WORLD, "FWBENCH_DIST_BACKEND": "gloo"})
    assert world == World(2, 1, 1, "127.0.0.1", 29500, "gloo")
    assert world.rendezvous == "127.0.0.1:29500"
    assert world_from_environment({}) is None
    peers = world_from_environment({**WORLD, "FWBENCH_PEERS": "a:1, b:2"})
    assert peers is not None and peers.peers == ("a:1", "b:2")
    assert context_from_environment(WORLD).world == World(2, 1, 1, "127.0.0.1", 29500)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"RANK": "2"}, "RANK=2"),
        ({"WORLD_SIZE": "0"}, "WORLD_SIZE=0"),
        ({"MASTER_PORT": "http"}, "MASTER_PORT"),
        ({"MASTER_ADDR": ""}, "MASTER_ADDR is required"),
        ({"FWBENCH_DIST_BACKEND": "gl oo"}, "FWBENCH_DIST_BACKEND"),
        ({"FWBENCH_PEERS": "127.0.0.1:1"}, "names 1 ranks; WORLD_SIZE is 2"),
        ({"FWBENCH_LOCAL_DEVICES": "0"}, "FWBENCH_LOCAL_DEVICES=0"),
        ({"FWBENCH_DIST_TIMEOUT_SECONDS": "soon"}, "FWBENCH_DIST_TIMEOUT_SECONDS"),
        ({"FWBENCH_LOCAL_DEVICES": "2"}, "several devices in each of several processes"),
    ],
)
def test_a_bad_world_variable_is_named(change: dict[str, str], named: str) -> None:
    with pytest.raises(InvalidContext, match=named):
        world_from_environment({**WORLD, **change})


def test_cpus_outside_the_process_are_refused() -> None:
    with pytest.raises(InvalidContext, match="may use CPUs"):
        pin_cpus({"FWBENCH_CPUS": "4096"})
    with pytest.raises(InvalidContext, match="expected CPU numbers"):
        pin_cpus({"FWBENCH_CPUS": "zero"})
    before = os.sched_getaffinity(0)
    pin_cpus({"FWBENCH_CPUS": ",".join(map(str, sorted(before)))})
    assert os.sched_getaffinity(0) == before


@pytest.fixture
def rank_stub():
    world = World(2, 1, 1, "127.0.0.1", 29500)
    plugin = FakePlugin(PluginContext(device="cpu", world=world))
    server = create_server(plugin, name="fake-cpu", variant="cpu", world=world)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)
    server.stop(0)


def _run(stub, **fields):
    fields = {"batch_size": 1, **fields}
    request = agent_pb2.RunRequest(
        workload="gemm", phase=agent_pb2.PHASE_TRAIN, params={"m": 100}, **fields
    )
    return list(stub.Run(request, timeout=30))


def test_a_rank_describes_its_world_and_what_it_distributes(rank_stub) -> None:
    reply = rank_stub.Describe(agent_pb2.DescribeRequest())
    assert (reply.world.world_size, reply.world.rank) == (2, 1)
    assert reply.world.rendezvous == "127.0.0.1:29500"
    assert [(w.name, list(w.strategies)) for w in reply.workloads] == [("gemm", ["ddp"])]


@pytest.fixture
def two_devices_stub():
    world = world_from_environment(
        {**WORLD, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "FWBENCH_LOCAL_DEVICES": "2"}
    )
    assert world is not None and (world.size, world.local_devices) == (1, 2)
    plugin = FakePlugin(PluginContext(device="cpu", world=world))
    server = create_server(plugin, name="fake-cpu", variant="cpu", world=world)
    with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
        yield agent_pb2_grpc.AgentServiceStub(channel)
    server.stop(0)


def test_a_process_of_two_devices_says_so_and_counts_both_batches(two_devices_stub) -> None:
    assert two_devices_stub.Describe(agent_pb2.DescribeRequest()).world.local_devices == 2
    events = _run(two_devices_stub, min_iterations=2, max_iterations=2, min_seconds=0, batch_size=3)
    assert events[-1].result.items_per_sample == 6  # 3 on each device


def test_a_plugin_that_ignores_its_devices_fails_the_cell(two_devices_stub, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_IGNORE_DEVICES", "1")
    with pytest.raises(grpc.RpcError) as raised:
        _run(two_devices_stub, min_iterations=2, max_iterations=2, min_seconds=0)
    assert "ran on 1 device(s), but this process was started with" in raised.value.details()


def test_a_rank_runs_exactly_the_steps_asked_and_reports_itself(rank_stub) -> None:
    events = _run(rank_stub, min_iterations=4, max_iterations=4, min_seconds=0)
    result = events[-1].result
    assert len(result.sample_nanoseconds) == 4
    assert (result.rank.rank, result.rank.world_size, result.rank.strategy) == (1, 2, "ddp")
    assert result.rank.engine_nanoseconds["communication_not_overlapped"] == 1000


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"min_iterations": 4, "max_iterations": 4}, "min_seconds"),  # default min_seconds 1
        ({"min_iterations": 4, "max_iterations": 8, "min_seconds": 0}, "max_iterations"),
    ],
)
def test_a_rank_refuses_a_loop_its_peers_could_end_elsewhere(rank_stub, fields, named) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _run(rank_stub, **fields)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert named in caught.value.details()


def test_an_unknown_strategy_is_unimplemented_with_the_offer(rank_stub) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _run(rank_stub, min_iterations=2, max_iterations=2, min_seconds=0, strategy="horovod")
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "offered: ddp" in caught.value.details()


def test_an_agent_alone_refuses_strategies_and_collectives(stub) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        _run(stub, strategy="ddp", min_iterations=2)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "runs alone" in caught.value.details()
    request = agent_pb2.RunRequest(workload="allreduce", phase=agent_pb2.PHASE_TRAIN, batch_size=1)
    with pytest.raises(grpc.RpcError) as caught:
        list(stub.Run(request, timeout=30))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert "needs an agent started as a rank of a world" in caught.value.details()
    assert not stub.Describe(agent_pb2.DescribeRequest()).HasField("world")
