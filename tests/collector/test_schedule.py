"""Interleaved repetition (schedule.py, runner.run_all with --repeat) and A/A instance names
(instances.py), with fake agents: no processes."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.instances import aa_pairs, base_name, expand_instances
from fwbench.collector.launch import AgentHandle
from fwbench.collector.plan import Cell, SelectionError, build_selection, plan_cells
from fwbench.collector.runner import AgentWork, RunContext, run_all
from fwbench.collector.schedule import cells_per_agent, stretches
from fwbench.spec import load_catalogue
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

CATALOGUE = load_catalogue()


def describe(name: str, fixed: bool = False, workloads: tuple[str, ...] = ("gemm", "conv2d")):
    return agent_pb2.DescribeResponse(
        identity=agent_pb2.AgentIdentity(name=name, framework="fake"),
        threads=agent_pb2.ThreadSettings(intra_op_threads=2, fixed_at_startup=fixed),
        workloads=[
            agent_pb2.WorkloadSupport(
                name=w,
                phases=[PHASE_VALUES["train"], PHASE_VALUES["infer"]],
                dtypes=[DTYPE_VALUES["float32"]],
                modes=["function"],
            )
            for w in workloads
        ],
    )


@dataclass
class FakeClient:
    name: str
    log: list[tuple[str, str, int]]  # (agent, workload, threads) in the order runs happened

    def run(self, request: agent_pb2.RunRequest, timeout: float | None) -> Iterator[Any]:
        self.log.append((self.name, request.workload, request.threads))
        yield agent_pb2.RunResponse(
            result=agent_pb2.RunResult(
                sample_nanoseconds=[1_000_000] * 10,
                settings=agent_pb2.EffectiveSettings(mode="function", device="cpu"),
            )
        )

    def describe(self) -> agent_pb2.DescribeResponse:
        return describe(self.name, fixed=True)

    def close(self) -> None:
        pass


def fake_handle(name: str, log: list[tuple[str, str, int]], threads: int = 0) -> AgentHandle:
    """A real handle (so it has every field the runner reads) around a fake client."""
    client = FakeClient(name, log)
    return AgentHandle(name, "local", "fake:0", client, threads=threads)  # type: ignore[arg-type]


@dataclass
class Recorder:
    rows: list[dict[str, Any]] = field(default_factory=list)

    def record(self, row: dict[str, Any], *_: Any) -> None:
        self.rows.append(row)


class Display:
    def cell_started(self, *_: Any) -> None:
        pass

    def cell_progress(self, *_: Any) -> None:
        pass

    def cell_finished(self, *_: Any) -> None:
        pass


def work_for(names: list[str], selection: Any, log: list, fixed: bool = False) -> list[AgentWork]:
    items = []
    for name in names:
        handle = fake_handle(name, log)
        info = describe(name, fixed)

        def restart(threads: int, name: str = name) -> AgentHandle:
            return fake_handle(name, log, threads)

        item = AgentWork(handle, info, [], restart)
        item.cells = plan_cells(name, info, CATALOGUE, selection)
        items.append(item)
    return items


def run(names: list[str], fixed: bool = False, **choices: Any) -> tuple[list[dict], list]:
    selection = build_selection(CATALOGUE, **{"phases": "train", "batch_sizes": "8", **choices})
    log: list[tuple[str, str, int]] = []
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(work_for(names, selection, log, fixed), ctx)
    return recorder.rows, log


def test_run_all_repeat_alternates_agents_per_cell() -> None:
    rows, log = run(["a", "b"], workloads="gemm,conv2d", repeat=3)
    assert [(r["agent"], r["workload"], r["repetition"]) for r in rows] == [
        ("a", "gemm", 0),
        ("b", "gemm", 0),
        ("a", "gemm", 1),
        ("b", "gemm", 1),
        ("a", "gemm", 2),
        ("b", "gemm", 2),
        ("a", "conv2d", 0),
        ("b", "conv2d", 0),
        ("a", "conv2d", 1),
        ("b", "conv2d", 1),
        ("a", "conv2d", 2),
        ("b", "conv2d", 2),
    ]
    assert [r["cell"] for r in rows] == list(range(12))  # cell stays the execution index
    assert [(agent, workload) for agent, workload, _ in log] == [
        (r["agent"], r["workload"]) for r in rows
    ]
    assert all(r["status"] == "ok" for r in rows)


def test_run_all_without_repeat_keeps_agent_by_agent_order() -> None:
    rows, _ = run(["a", "b"], workloads="gemm,conv2d")
    assert [(r["agent"], r["workload"]) for r in rows] == [
        ("a", "gemm"),
        ("a", "conv2d"),
        ("b", "gemm"),
        ("b", "conv2d"),
    ]
    assert {r["repetition"] for r in rows} == {0}


def test_run_all_repeat_restarts_fixed_agents_once_per_thread_count() -> None:
    rows, log = run(["a", "b"], fixed=True, workloads="gemm,conv2d", threads="1,2", repeat=2)
    # Threads outermost: every cell at 1 thread (alternating), then every cell at 2.
    assert [threads for _, _, threads in log] == [1] * 8 + [2] * 8
    assert [r["agent"] for r in rows[:4]] == ["a", "b", "a", "b"]
    assert all(r["status"] == "ok" for r in rows)


def test_stretches_record_unsupported_cells_once() -> None:
    selection = build_selection(
        CATALOGUE, workloads="gemm,conv2d", phases="train", batch_sizes="8", repeat=3
    )
    log: list = []
    items = work_for(["a", "b"], selection, log)
    # Agent b does not implement conv2d.
    items[1].describe = describe("b", workloads=("gemm",))
    items[1].cells = plan_cells("b", items[1].describe, CATALOGUE, selection)
    order = [
        (item.handle.name, cell.workload, rep)
        for item, part in stretches(items, 3)
        for cell, rep in part
    ]
    assert order.count(("b", "conv2d", 0)) == 1
    assert ("b", "conv2d", 1) not in order
    assert order.count(("a", "conv2d", 2)) == 1
    assert cells_per_agent(items, 3) == [6, 4]


def test_build_selection_checks_repeat() -> None:
    with pytest.raises(SelectionError, match="repeat 0"):
        build_selection(CATALOGUE, workloads="gemm", phases="train", batch_sizes="8", repeat=0)


def test_expand_instances_names_aa_copies() -> None:
    assert expand_instances(["tf-mkl", "tf-eigen"], ["tf-eigen"]) == (
        "tf-mkl",
        "tf-eigen",
        "tf-eigen#2",
    )
    assert expand_instances(["a", "a", "a"]) == ("a", "a#2", "a#3")
    assert expand_instances(["b"], ["a"]) == ("b", "a", "a#2")
    assert expand_instances(["x@h:1", "x@h:1"]) == ("x@h:1",)
    assert base_name("tf-eigen#2") == "tf-eigen"


def test_aa_pairs_pair_each_copy_with_the_first() -> None:
    assert aa_pairs(["a#2", "b", "a", "a#3"]) == [("a", "a#2"), ("a", "a#3")]
    assert aa_pairs(["a", "b"]) == []


def test_cell_dataclass_unchanged() -> None:
    # The schedule groups by these fields; a new Cell field that splits keys must be added.
    assert {f for f in Cell.__dataclass_fields__} == {
        "agent",
        "workload",
        "phase",
        "batch_size",
        "dtype",
        "threads",
        "params",
        "unsupported_reason",
        "mode",
    }
