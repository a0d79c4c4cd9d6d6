"""One CellKey (store/cell_key.py) for a cell wherever it is met: a planned cell (Cell.key),
its recorded row (CellKey.of_row), a stored decision, the schedule and a resume all agree on
it, and its fields are read by name."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, cast

import pandas as pd
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.normalize import failure_row, identity_columns
from fwbench.collector.run.plan import Cell
from fwbench.collector.run.resume import planned_key, row_key
from fwbench.collector.run.schedule import stretches
from fwbench.collector.store.cell_key import KEY_COLUMNS, CellKey, varying_params
from fwbench.spec import load_catalogue

ALONE = Cell("a", "gemm", "infer", 8, "float32", 2, {"n": 64, "m": 32, "k": 16})
WORLD = Cell("a", "lenet", "train", 4, "float32", 1, {}, strategy="ddp")


def _row(cell: Cell) -> dict[str, Any]:
    handle = AgentHandle(instance=Instance("a"), address="127.0.0.1:1", client=cast(Any, None))
    describe = agent_pb2.DescribeResponse()
    identity = identity_columns("r", 3, handle, describe, cell, load_catalogue())
    return failure_row(identity, 0, "failed", "E", "e")


def test_a_planned_cell_and_its_recorded_row_have_one_key() -> None:
    for cell in (ALONE, WORLD):
        row = _row(cell)
        assert CellKey.of_row(row) == cell.key
        assert CellKey.of_row(pd.DataFrame([row]).to_dict("records")[0]) == cell.key
        assert tuple(row[column] for column in KEY_COLUMNS) == tuple(cell.key)
    assert ALONE.key.params == json.dumps({"k": 16, "m": 32, "n": 64})  # keys sorted
    assert (ALONE.key.threads, ALONE.key.strategy, WORLD.key.strategy) == (2, None, "ddp")
    assert ALONE.key.label() == "gemm infer bs=8 float32 t=2"
    assert WORLD.key.label() == "lenet train bs=4 float32 t=1 ddp"
    assert ALONE.key.label({"m"}) == "gemm infer bs=8 float32 m=32 t=2"


def test_a_stored_decision_reads_back_as_the_same_key() -> None:
    stored = json.loads(json.dumps({"key": list(WORLD.key)}))
    assert CellKey(*stored["key"]) == WORLD.key


def test_resume_matches_a_row_to_its_cell_whatever_dtype_and_strategy_the_agent_ran() -> None:
    row = _row(WORLD) | {"repetition": 1, "dtype": "bfloat16", "strategy": "pipeline"}
    assert row_key(row) == planned_key(WORLD, 1)
    assert row_key(row) != planned_key(WORLD, 0)
    assert row_key(row | {"batch_size": 8}) != planned_key(WORLD, 1)


def test_the_schedule_keeps_each_shape_its_own_cell() -> None:
    """Two cells that differ only in a shape parameter are two keys: with --repeat and one
    process per agent, each runs all its repetitions before the next."""

    class Work:
        def __init__(self, cells: list[Cell]) -> None:
            self.cells = cells

    small, large = (Cell("a", "gemm", "infer", 1, "float32", 0, {"m": m}) for m in (8, 16))
    assert small.key != large.key and varying_params([small.key, large.key]) == {"m"}
    order = stretches([Work([small, large])], repeat=2, fresh_process=False)
    assert [[(c.params["m"], r) for c, r in cells] for _, cells in order] == [
        [(8, 0)],
        [(8, 1)],
        [(16, 0)],
        [(16, 1)],
    ]


def test_decided_questions_know_an_aa_pair_from_the_instances_not_the_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """--until-decided's comparisons: an A/A twin against its own agent (one spread for the
    margin), other agents against the baseline; the world shape keeps two worlds apart."""
    from fwbench.collector.agents import specs
    from fwbench.collector.run.decide import questions_for
    from fwbench.collector.run.work import AgentWork

    def work(instance: Instance) -> AgentWork:
        handle = AgentHandle(instance=instance, address="127.0.0.1:1", client=cast(Any, None))
        return AgentWork(handle, agent_pb2.DescribeResponse(), [ALONE])

    a, b = Instance("a"), Instance("b")
    world, world_twin = a.as_world(2), replace(a.as_world(2), copy=2)
    run = [work(i) for i in (a, replace(a, copy=2), b, world, world_twin)]
    monkeypatch.setattr(specs.Instance, "parse", None)  # no name is parsed back
    asked = {(q.agent, q.against): q.twins for q in questions_for(run, "a")}
    assert asked == {
        ("a#2", "a"): True,
        ("b", "a"): False,
        ("a~w2", "a"): False,
        ("a~w2#2", "a~w2"): True,
    }
