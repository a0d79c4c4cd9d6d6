"""A world's ranks combined into one result (run/combine.py): the slowest rank's samples, every
rank's own kept, the world's figures (busbw by nccl-tests' definition), and ranks that disagree
refused as a protocol violation, never stored."""

from __future__ import annotations

import json

import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import (
    AgentSpecError,
    Instance,
    aa_base,
    aa_pairs,
    expand_instances,
    with_worlds,
)
from fwbench.collector.run.combine import combine, world_columns
from fwbench.collector.run.validate import ProtocolViolation

REQUEST = agent_pb2.RunRequest(run_id="cell", workload="allreduce", batch_size=4)


def rank_result(rank: int, samples: list[int], size: int = 2, **fields) -> agent_pb2.RunResult:
    return agent_pb2.RunResult(
        run_id=f"cell-rank{rank}",
        sample_nanoseconds=samples,
        measure_started_unix_nanoseconds=1_000 + rank,
        measure_ended_unix_nanoseconds=1_000 + rank + sum(samples),
        rank=agent_pb2.RankResult(rank=rank, world_size=size, **fields),
    )


def test_the_world_runs_at_its_slowest_ranks_pace() -> None:
    results = [rank_result(0, [10, 30, 10]), rank_result(1, [20, 20, 20])]
    world = combine(REQUEST, results)
    assert list(world.sample_nanoseconds) == [20, 20, 20]  # rank 1 took 60 in all, rank 0 50
    assert world.run_id == "cell"
    assert world.measure_started_unix_nanoseconds == 1_000
    assert world.measure_ended_unix_nanoseconds == 1_061
    assert world.items_per_sample == 8  # 4 per rank


@pytest.mark.parametrize(
    ("results", "field"),
    [
        ([rank_result(0, [1, 2]), rank_result(1, [1])], "sample_nanoseconds"),
        ([rank_result(0, [1]), rank_result(0, [1])], "run_id"),
        ([rank_result(0, [1]), rank_result(1, [1], size=3)], "rank"),
        (
            [rank_result(0, [1]), agent_pb2.RunResult(run_id="cell-rank1", sample_nanoseconds=[1])],
            "rank",
        ),
    ],
)
def test_ranks_that_disagree_break_the_protocol(results, field) -> None:
    if field == "run_id":
        results[1].run_id = "cell-rank0"
    with pytest.raises(ProtocolViolation) as caught:
        combine(REQUEST, results)
    assert caught.value.field == field


def test_allreduce_bandwidths_follow_nccl_tests() -> None:
    megabyte = 1 << 20
    results = [
        rank_result(r, [2_000_000] * 3, size=4, strategy="collective", collective_bytes=megabyte)
        for r in range(4)
    ]
    columns = world_columns(results, [[0], [1], [2], [3]], "local")
    assert columns["algbw_bytes_per_second"] == pytest.approx(megabyte / 0.002)
    assert columns["busbw_bytes_per_second"] == pytest.approx(megabyte / 0.002 * 2 * 3 / 4)
    assert columns["rank_cpus"] == "0;1;2;3"
    assert json.loads(columns["rank_samples_ns"])[3] == [2_000_000] * 3
    assert "communication_seconds" not in columns  # no engine figure from these ranks


def test_world_instances_are_named_and_paired() -> None:
    instances = with_worlds(expand_instances(["torch-cpu", "torch-cpu"]), [(1, 1), (2, 1)])
    worlds = tuple(str(instance) for instance in instances)
    assert worlds == ("torch-cpu~w1", "torch-cpu~w2", "torch-cpu~w1#2", "torch-cpu~w2#2")
    assert [instance.ranks for instance in instances] == [1, 2, 1, 2]
    assert {instance.agent for instance in instances} == {"torch-cpu"}
    assert aa_base("torch-cpu~w2#2") == "torch-cpu~w2"
    assert aa_pairs(worlds) == [
        ("torch-cpu~w1", "torch-cpu~w1#2"),
        ("torch-cpu~w2", "torch-cpu~w2#2"),
    ]
    assert with_worlds(expand_instances(["tf-mkl"]), []) == (Instance("tf-mkl"),)
    with pytest.raises(AgentSpecError, match="attached agent"):
        with_worlds(expand_instances(["torch-cpu@10.0.0.1:50051"]), [(2, 1)])
