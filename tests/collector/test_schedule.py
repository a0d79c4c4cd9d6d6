"""Interleaved repetition (schedule.py, runner.run_all with --repeat) and A/A instance names
(agents/specs.py), with fake agents: no processes."""

from __future__ import annotations

import itertools
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import (
    AgentSpecError,
    Instance,
    aa_pairs,
    base_name,
    expand_instances,
)
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.context import RunContext
from fwbench.collector.run.execute import run_all
from fwbench.collector.run.plan import Cell, SelectionError, build_selection, plan_cells
from fwbench.collector.run.schedule import agent_order, cells_per_agent, stretches
from fwbench.collector.run.session import run_status
from fwbench.collector.run.work import AgentWork
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


class Unavailable(grpc.RpcError):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return "connection reset"


_pids = itertools.count(1000)


@dataclass
class FakeClient:
    name: str
    log: list[tuple[str, str, int]]  # (agent, workload, threads) in the order runs happened
    pid: int = field(default_factory=lambda: next(_pids))
    crash_on: str = ""  # a workload during which this process dies
    dead: bool = False
    closed: bool = False  # stopped: a call fails, as it would on a process that has gone

    def run(self, request: agent_pb2.RunRequest, timeout: float | None) -> Iterator[Any]:
        self.log.append((self.name, request.workload, request.threads))
        if self.dead or self.closed or request.workload == self.crash_on:
            self.dead = True
            raise Unavailable()
        started = time.time_ns()
        yield agent_pb2.RunResponse(
            result=agent_pb2.RunResult(
                run_id=request.run_id,
                sample_nanoseconds=[1_000_000] * 10,
                measure_started_unix_nanoseconds=started,
                measure_ended_unix_nanoseconds=started + 10_000_000,
                settings=agent_pb2.EffectiveSettings(mode="function", device="cpu"),
            )
        )

    def describe(self) -> agent_pb2.DescribeResponse:
        response = describe(self.name, fixed=True)
        response.pid = self.pid
        return response

    def healthy(self) -> bool:
        return not self.dead

    def close(self) -> None:
        if not self.closed:
            self.log.append((self.name, STOPPED, self.pid))
        self.closed = True


STOPPED = "(stopped)"  # a log entry: this process was stopped


def measured(log: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    return [entry for entry in log if entry[1] != STOPPED]


def fake_handle(name: str, log: list[tuple[str, str, int]], threads: int = 0) -> AgentHandle:
    """A real handle (so it has every field the runner reads) around a fake client."""
    client = FakeClient(name, log)
    return AgentHandle(Instance.parse(name), "fake:0", client, threads=threads)  # type: ignore[arg-type]


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

    def note(self, *_: Any) -> None:
        pass


def work_for(names: list[str], selection: Any, log: list, fixed: bool = False) -> list[AgentWork]:
    items = []
    for name in names:
        handle = fake_handle(name, log)
        info = describe(name, fixed)
        info.pid = handle.client.pid  # type: ignore[attr-defined]

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


def test_run_all_repeat_runs_a_fresh_process_per_repetition() -> None:
    rows, _ = run(["a", "b"], workloads="gemm,conv2d", repeat=3)
    # Repetition-major: each process of an agent runs all its cells, agents alternating and
    # their order turning each repetition (A B, B A, A B).
    assert [(r["agent"], r["workload"], r["repetition"]) for r in rows] == [
        (agent, workload, repetition)
        for repetition, agents in enumerate([("a", "b"), ("b", "a"), ("a", "b")])
        for agent in agents
        for workload in ("gemm", "conv2d")
    ]
    assert [r["cell"] for r in rows] == list(range(12))
    assert all(r["status"] == "ok" for r in rows)
    pids = {(r["agent"], r["repetition"]): set() for r in rows}
    for r in rows:
        pids[(r["agent"], r["repetition"])].add(r["agent_pid"])
    assert all(len(found) == 1 for found in pids.values())  # one process per repetition
    assert len(set.union(*pids.values())) == 6  # and a new one for each (2 agents x 3)


def test_run_all_replaces_a_crashed_agent_and_the_sweep_goes_on() -> None:
    selection = build_selection(
        CATALOGUE, workloads="gemm,conv2d", phases="train", batch_sizes="8", repeat=2
    )
    log: list = []
    items = work_for(["a"], selection, log)
    items[0].handle.client.crash_on = "gemm"  # type: ignore[attr-defined]
    first_pid = items[0].handle.client.pid  # type: ignore[attr-defined]
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(items, ctx)
    assert [(r["workload"], r["repetition"], r["status"]) for r in recorder.rows] == [
        ("gemm", 0, "failed"),  # the process died during this cell
        ("conv2d", 0, "ok"),  # a new process, started right away, goes on
        ("gemm", 1, "ok"),
        ("conv2d", 1, "ok"),
    ]
    assert "agent crashed during this cell" in recorder.rows[0]["error"]
    assert recorder.rows[1]["agent_pid"] != first_pid


def test_run_all_fails_the_rest_of_an_attached_agent_that_crashed() -> None:
    selection = build_selection(CATALOGUE, workloads="gemm,conv2d", phases="train", batch_sizes="8")
    log: list = []
    items = work_for(["a"], selection, log)
    items[0].restart = None  # attached: nobody here can start it again
    items[0].handle.client.crash_on = "gemm"  # type: ignore[attr-defined]
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(items, ctx)
    assert [r["status"] for r in recorder.rows] == ["failed", "failed"]
    assert "not run: agent a failed earlier" in recorder.rows[1]["error"]


def test_run_all_failed_fresh_start_fails_that_repetition_only() -> None:
    selection = build_selection(
        CATALOGUE, workloads="gemm", phases="train", batch_sizes="8", repeat=3
    )
    log: list = []
    items = work_for(["a"], selection, log)
    starts = itertools.count()

    def flaky_restart(threads: int) -> AgentHandle:
        if next(starts) == 0:
            raise RuntimeError("port in use")
        return fake_handle("a", log, threads)

    items[0].restart = flaky_restart
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(items, ctx)
    statuses = [(r["repetition"], r["status"]) for r in recorder.rows]
    assert statuses == [(0, "ok"), (1, "failed"), (2, "ok")]
    assert "repetition 1 failed: port in use" in recorder.rows[1]["error"]


def test_an_agent_given_back_whose_start_fails_says_so_and_fails_its_cells() -> None:
    """After Describe an agent's process is given back (idle, as a scheduler's job is); the
    start for its cells failing fails them, naming a start, not a restart, and the threads
    as the cell asked them ("its default threads" for 0)."""
    selection = build_selection(CATALOGUE, workloads="gemm,conv2d", phases="train", batch_sizes="8")
    log: list = []
    items = work_for(["a"], selection, log)
    items[0].rest()

    def refused(threads: int) -> AgentHandle:
        raise RuntimeError("Slurm job 30: FAILED")

    items[0].restart = refused
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(items, ctx)
    assert [r["status"] for r in recorder.rows] == ["failed", "failed"]
    said = "not run: starting a with its default threads failed: Slurm job 30: FAILED"
    assert {r["error"] for r in recorder.rows} == {said}


def test_run_all_same_process_alternates_agents_per_cell() -> None:
    rows, log = run(["a", "b"], workloads="gemm,conv2d", repeat=3, fresh_process=False)
    assert [(r["agent"], r["workload"], r["repetition"]) for r in rows] == [
        ("a", "gemm", 0),
        ("b", "gemm", 0),
        ("b", "gemm", 1),
        ("a", "gemm", 1),
        ("a", "gemm", 2),
        ("b", "gemm", 2),
        ("a", "conv2d", 0),
        ("b", "conv2d", 0),
        ("b", "conv2d", 1),
        ("a", "conv2d", 1),
        ("a", "conv2d", 2),
        ("b", "conv2d", 2),
    ]
    assert [r["cell"] for r in rows] == list(range(12))  # cell stays the execution index
    assert [(agent, workload) for agent, workload, _ in measured(log)] == [
        (r["agent"], r["workload"]) for r in rows
    ]
    assert all(r["status"] == "ok" for r in rows)
    assert len({r["agent_pid"] for r in rows}) == 2  # one process per agent throughout


def test_run_all_without_repeat_keeps_agent_by_agent_order() -> None:
    rows, _ = run(["a", "b"], workloads="gemm,conv2d")
    assert [(r["agent"], r["workload"]) for r in rows] == [
        ("a", "gemm"),
        ("a", "conv2d"),
        ("b", "gemm"),
        ("b", "conv2d"),
    ]
    assert {r["repetition"] for r in rows} == {0}


def test_an_agent_rests_once_it_will_not_measure_again() -> None:
    """Its process stops before the next agent measures: idle, it would hold memory (on a GPU,
    JAX keeps 75% of the device from its first cell) while another agent measures."""

    def events(log: list[tuple[str, str, int]]) -> list[tuple[str, str]]:
        return [(agent, what) for agent, what, _ in log]

    rows, log = run(["a", "b"], workloads="gemm,conv2d")  # agent by agent, one process each
    assert events(log) == [
        ("a", "gemm"),
        ("a", "conv2d"),
        ("a", STOPPED),
        ("b", "gemm"),
        ("b", "conv2d"),
        ("b", STOPPED),
    ]
    rows, log = run(["a", "b"], workloads="gemm", repeat=3)  # fresh processes
    assert events(log) == [
        ("a", "gemm"),
        ("a", STOPPED),
        ("b", "gemm"),
        ("b", STOPPED),
        ("b", "gemm"),
        ("b", STOPPED),
        ("a", "gemm"),
        ("a", STOPPED),
        ("a", "gemm"),
        ("a", STOPPED),
        ("b", "gemm"),
        ("b", STOPPED),
    ]
    assert len({r["agent_pid"] for r in rows}) == 6 and {r["status"] for r in rows} == {"ok"}
    # One process per agent for the run: kept between its cells, stopped after its last.
    rows, log = run(["a", "b"], workloads="gemm,conv2d", repeat=2, fresh_process=False)
    assert events(log)[-4:] == [("b", "conv2d"), ("b", STOPPED), ("a", "conv2d"), ("a", STOPPED)]
    assert [e for e in events(log) if e[1] == STOPPED] == [("b", STOPPED), ("a", STOPPED)]
    assert {r["status"] for r in rows} == {"ok"}


def test_an_attached_agent_is_never_stopped_by_the_run() -> None:
    selection = build_selection(CATALOGUE, workloads="gemm", phases="train", batch_sizes="8")
    log: list = []
    items = work_for(["a"], selection, log)
    items[0].restart = None  # attached: not the collector's to stop
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(items, ctx)
    assert [what for _, what, _ in log] == ["gemm"] and not items[0].idle


@pytest.mark.parametrize("fresh", [True, False])
def test_run_all_repeat_keeps_thread_counts_outermost(fresh: bool) -> None:
    rows, log = run(
        ["a", "b"],
        fixed=True,
        workloads="gemm,conv2d",
        threads="1,2",
        repeat=2,
        fresh_process=fresh,
    )
    # Threads outermost: every cell at 1 thread (alternating), then every cell at 2.
    assert [threads for _, _, threads in measured(log)] == [1] * 8 + [2] * 8
    first = ["a", "a", "b", "b"] if fresh else ["a", "b", "b", "a"]
    assert [r["agent"] for r in rows[:4]] == first
    assert all(r["status"] == "ok" for r in rows)
    # Fixed agents get a process per thread count; fresh ones also one per repetition.
    assert len({r["agent_pid"] for r in rows}) == (8 if fresh else 4)


@pytest.mark.parametrize("count", range(1, 8))
def test_agent_order_is_a_balanced_latin_square(count: int) -> None:
    cycle = count if count % 2 == 0 else 2 * count
    rows = [agent_order(count, block) for block in range(cycle)]
    assert rows[0] == list(range(count))  # without repetition: the order given
    assert agent_order(count, cycle + 3) == rows[3 % cycle]  # it repeats after a cycle
    for row in rows:
        assert sorted(row) == list(range(count))
    # Every agent in every position equally often.
    for position in range(count):
        assert sorted(row[position] for row in rows) == sorted(
            list(range(count)) * (cycle // count)
        )
    # Every ordered pair of agents adjacent equally often (first-order carry-over).
    followers = Counter((row[i], row[i + 1]) for row in rows for i in range(count - 1))
    pairs = count * (count - 1)
    assert len(followers) == pairs
    assert set(followers.values()) == ({cycle * (count - 1) // pairs} if pairs else set())


def test_the_aa_twin_does_not_always_follow_the_same_agent() -> None:
    selection = build_selection(CATALOGUE, workloads="gemm", phases="train", batch_sizes="8")
    items = work_for(["tf-mkl", "tf-eigen", "tf-eigen#2"], selection, [])
    order = [item.handle.name for item, _ in stretches(items, 6, fresh_process=True)]
    rounds = [order[i : i + 3] for i in range(0, 18, 3)]
    before_twin = Counter(r[r.index("tf-eigen#2") - 1] for r in rounds if r[0] != "tf-eigen#2")
    assert before_twin == {"tf-mkl": 2, "tf-eigen": 2}
    assert Counter(r.index("tf-eigen#2") for r in rounds) == {0: 2, 1: 2, 2: 2}
    # A round of --until-decided turns the order as a repetition does.
    assert [item.handle.name for item, _ in stretches(items, 1, True, first_block=1)] == rounds[1]


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
    assert cells_per_agent(items, 3, fresh_process=True) == [6, 4]


def test_build_selection_checks_repeat() -> None:
    with pytest.raises(SelectionError, match="repeat 0"):
        build_selection(CATALOGUE, workloads="gemm", phases="train", batch_sizes="8", repeat=0)


def test_expand_instances_names_aa_copies() -> None:
    def specs(*given: list[str]) -> list[str]:
        return [instance.spec for instance in expand_instances(*given)]

    assert specs(["tf-mkl", "tf-eigen"], ["tf-eigen"]) == ["tf-mkl", "tf-eigen", "tf-eigen#2"]
    assert specs(["a", "a", "a"]) == ["a", "a#2", "a#3"]
    assert specs(["b"], ["a"]) == ["b", "a", "a#2"]
    with pytest.raises(AgentSpecError, match="the address h:1 is given twice"):
        expand_instances(["x@h:1", "x@h:1"])
    with pytest.raises(AgentSpecError, match="given twice"):
        expand_instances(["x@h:1", "y@h:1"])
    assert specs(["x@h:1", "x@h:2"]) == ["x@h:1", "x@h:2"]
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
        "strategy",  # in Cell.key
    }


@pytest.mark.parametrize(
    ("statuses", "planned", "interrupted", "escaped", "expected"),
    [
        ({"ok": 3, "unsupported": 1}, 4, False, "", "ok"),
        ({"ok": 3, "failed": 1}, 4, False, "", "failed"),
        ({"ok": 2, "cancelled": 1}, 4, True, "", "interrupted"),
        ({"ok": 2}, 4, False, "", "incomplete"),
        ({"ok": 2}, 4, False, "PersistenceError: disk full", "failed"),
        ({}, 4, False, "", "incomplete"),
    ],
)
def test_run_status_is_ok_only_when_every_planned_cell_is_ok_or_unsupported(
    statuses: dict[str, int], planned: int, interrupted: bool, escaped: str, expected: str
) -> None:
    assert run_status(statuses, planned, interrupted, escaped) == expected


def test_a_cell_with_a_silent_gap_is_failed_as_stalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent that went silent mid-cell (stopped, then continued) finishes the cell, but a
    sample may span the gap: the cell is failed, never ok."""
    from fwbench.collector.run import call

    monkeypatch.setattr(call, "MEASURE_GAP_SECONDS", 0.05)
    selection = build_selection(CATALOGUE, workloads="gemm", phases="train", batch_sizes="8")
    log: list = []
    items = work_for(["a"], selection, log)
    client = items[0].handle.client
    real_run = client.run  # type: ignore[attr-defined]

    def slow_run(request: Any, timeout: Any) -> Iterator[Any]:
        measuring = agent_pb2.Progress(stage=agent_pb2.STAGE_MEASURE, elapsed_seconds=1.0)
        yield agent_pb2.RunResponse(progress=measuring)
        time.sleep(0.1)  # nothing sent while measuring for longer than the gap allows
        yield from real_run(request, timeout)

    client.run = slow_run  # type: ignore[attr-defined]
    items[0].describe.spec_version = "1.2"  # an agent that sends heartbeats
    recorder = Recorder()
    ctx = RunContext("r", CATALOGUE, selection, recorder, Display(), None)  # type: ignore[arg-type]
    run_all(items, ctx)
    [row] = recorder.rows
    assert row["status"] == "failed" and row["error_code"] == "STALLED"
    assert "a sample may span the stall" in row["error"]
    assert "its 10 samples are kept with this row" in row["error"] and row["n"] == 10
