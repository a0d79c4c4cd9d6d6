"""Resuming checks the plan made again against what the run recorded (run/resume.py): kept
cells are skipped, cancelled ones measured again, and a plan that moved a recorded cell is
refused rather than mixing two plans in one run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fwbench.collector.run.plan import Cell, LoopSettings, Selection
from fwbench.collector.run.resume import (
    ResumePoint,
    cells_to_skip,
    check_same_agents,
    kept_statuses,
    selection_from_record,
    selection_record,
)
from fwbench.collector.store.owner import ResumeRefused


def _cell(batch_size: int) -> Cell:
    return Cell("a", "gemm", "infer", batch_size, "float32", 0, {"m": 64})


def _row(cell: int, batch_size: int, status: str) -> dict[str, Any]:
    return {
        "cell": cell,
        "agent": "a",
        "workload": "gemm",
        "phase": "infer",
        "batch_size": batch_size,
        "threads_requested": 0,
        "params": json.dumps({"m": 64}),
        "repetition": 0,
        "status": status,
    }


def _point(*rows: dict[str, Any], agents: dict[str, Any] | None = None) -> ResumePoint:
    metadata = {"agents": agents or {}}
    return ResumePoint("r", Path("out"), metadata, pd.DataFrame(list(rows)))


def test_kept_cells_are_skipped_and_cancelled_ones_measured_again() -> None:
    point = _point(_row(0, 1, "ok"), _row(1, 2, "failed"), _row(2, 3, "cancelled"))
    order = [(_cell(b), 0) for b in (1, 2, 3, 4)]
    assert cells_to_skip(point, order) == frozenset({0, 1})
    assert point.redo() == [2]
    assert kept_statuses(point) == {"ok": 1, "failed": 1}


def test_a_plan_that_moved_a_recorded_cell_is_refused() -> None:
    point = _point(_row(0, 1, "ok"), _row(1, 2, "ok"))
    with pytest.raises(ResumeRefused, match=r"cell 1 .* is not where the plan"):
        cells_to_skip(point, [(_cell(b), 0) for b in (1, 3, 2)])
    with pytest.raises(ResumeRefused, match="cell 1"):
        cells_to_skip(point, [(_cell(1), 0)])  # the plan shrank


def test_changed_or_other_agents_are_refused() -> None:
    identity = {"framework": "torch", "framework_version": "2.13", "variant": "cpu"}
    point = _point(agents={"a": {"describe": {"identity": identity}}})
    check_same_agents(point, {"a": {"identity": identity}})
    with pytest.raises(ResumeRefused, match=r"framework_version '2.13' -> '2.14'"):
        check_same_agents(point, {"a": {"identity": {**identity, "framework_version": "2.14"}}})
    with pytest.raises(ResumeRefused, match="measured by a, not b"):
        check_same_agents(point, {"b": {"identity": identity}})


def test_a_selection_survives_its_record() -> None:
    selection = Selection(
        workloads=("gemm", "conv2d"),
        phases=("infer",),
        batch_sizes=(1, 8),
        threads=(0, 2),
        modes=("all",),
        params={"m": (64, 128)},
        loop=LoopSettings(3, 10, 0.5, 100),
        seed=7,
        repeat=3,
        fresh_process=False,
    )
    assert selection_from_record(json.loads(json.dumps(selection_record(selection)))) == selection


def test_a_record_from_before_sweeps_reads_its_one_value_a_parameter() -> None:
    record = selection_record(Selection(workloads=("gemm",), phases=("infer",), batch_sizes=(1,)))
    record["params"] = {"m": 64}  # what runs recorded before --param took several values
    assert selection_from_record(record).params == {"m": (64,)}
