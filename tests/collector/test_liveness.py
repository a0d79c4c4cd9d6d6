"""Liveness of a cell (run/liveness.py, run/own_clock.py, run/call.py, run/execute.py) with fake
calls and a fake clock of the collector's own freezes: a stuck measuring thread (heartbeats,
no progress) fails as hung and its agent is restarted; a gap while measuring fails the cell
and keeps its samples; a frozen collector blames itself, not the agent, and measures the cell
again; a cell timeout restarts the agent. Real agents: tests/faults/test_liveness_faults.py."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run import liveness
from fwbench.collector.run.context import RunContext
from fwbench.collector.run.execute import run_all
from fwbench.collector.run.liveness import CellWatch
from fwbench.collector.run.own_clock import OwnClock
from fwbench.collector.run.plan import build_selection, plan_cells
from fwbench.collector.run.work import AgentWork
from fwbench.spec import load_catalogue
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

CATALOGUE = load_catalogue()
MEASURE = agent_pb2.STAGE_MEASURE


class Freezes:
    """The collector's own clock, told its freezes by the test."""

    def __init__(self) -> None:
        self.freezes: list[tuple[float, float]] = []

    def frozen_within(self, start: float, end: float) -> float:
        return sum(max(0.0, min(end, b) - max(start, a)) for a, b in self.freezes)


class Failed(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._code.name


class Call:
    """A Run call replaying a script: ("progress", stage, iterations, elapsed), ("sleep", s),
    ("beat", s) (the last progress every 20 ms for s seconds, forever when None), ("freeze",
    s) (the collector frozen for the next s seconds, as it sleeps), ("result", samples)."""

    def __init__(
        self, script: list[tuple[Any, ...]], freezes: Freezes | None = None, run_id: str = ""
    ) -> None:
        self.script, self.freezes, self.run_id = script, freezes, run_id
        self.cancelled = threading.Event()

    def cancel(self) -> None:
        self.cancelled.set()

    def __iter__(self) -> Iterator[agent_pb2.RunResponse]:
        last = agent_pb2.Progress()
        for what, *args in self.script:
            if what == "progress":
                last = agent_pb2.Progress(stage=args[0], iterations_done=args[1])
                last.elapsed_seconds = args[2]
                yield agent_pb2.RunResponse(progress=last)
            elif what in ("sleep", "freeze"):
                if what == "freeze":
                    assert self.freezes is not None
                    now = time.monotonic()
                    self.freezes.freezes.append((now, now + args[0]))
                if self.cancelled.wait(args[0]):
                    raise Failed(grpc.StatusCode.CANCELLED)
            elif what == "beat":
                until = time.monotonic() + (args[0] if args[0] is not None else 1e9)
                while time.monotonic() < until:
                    if self.cancelled.wait(0.02):
                        raise Failed(grpc.StatusCode.CANCELLED)
                    yield agent_pb2.RunResponse(progress=last)
            elif what == "result":
                now = time.time_ns()
                yield agent_pb2.RunResponse(
                    result=agent_pb2.RunResult(
                        run_id=self.run_id,
                        sample_nanoseconds=args[0],
                        measure_started_unix_nanoseconds=now - sum(args[0]) - 1,
                        measure_ended_unix_nanoseconds=now,
                        settings=agent_pb2.EffectiveSettings(mode="eager", device="cpu"),
                    )
                )
            elif what == "deadline":
                raise Failed(grpc.StatusCode.DEADLINE_EXCEEDED)


def watched(call: Call, hang: float | None, freezes: Freezes | None = None) -> CellWatch:
    watch = CellWatch(call, hang, clock=freezes or Freezes())  # type: ignore[arg-type]
    try:
        for _ in watch.events():
            pass
    except grpc.RpcError:
        assert watch.fired, "cancelled, but not by the watch"
    finally:
        watch.stop()
    return watch


def test_heartbeats_without_progress_are_a_stuck_thread() -> None:
    started = time.monotonic()
    watch = watched(Call([("progress", MEASURE, 7, 1.0), ("beat", None)]), hang=0.3)
    assert 0.3 <= time.monotonic() - started < 2
    assert "sent heartbeats but made no progress for 0.3 s" in watch.fired
    assert "at measure, 7 iterations done" in watch.fired
    assert "its measuring thread is stuck" in watch.fired


def test_silence_is_a_hung_agent() -> None:
    watch = watched(Call([("progress", MEASURE, 1, 1.0), ("sleep", 10)]), hang=0.3)
    assert watch.fired.startswith("sent nothing for 0.3 s")


def test_progress_keeps_a_long_cell_alive() -> None:
    script: list[tuple[Any, ...]] = []
    for done in range(8):  # 0.8 s, progress every 0.1 s, heartbeats between
        script += [("progress", MEASURE, done, 1 + done / 10), ("beat", 0.1)]
    watch = watched(Call([*script, ("result", [5])]), hang=0.3)
    assert not watch.fired
    assert watch.longest_measure_gap < 0.2


def test_a_long_step_is_stuck_only_past_the_hang_timeout() -> None:
    """A build (no iterations) of 0.5 s under a 1 s hang timeout is not stuck."""
    script = [("progress", agent_pb2.STAGE_BUILD, 0, 0.1), ("beat", 0.5)]
    script += [("progress", MEASURE, 0, 0.7), ("result", [5])]
    assert not watched(Call(script), hang=1.0).fired


def test_the_agents_own_clock_shows_a_gap_the_collector_read_late() -> None:
    script = [("progress", MEASURE, 1, 1.0), ("progress", MEASURE, 2, 11.0), ("result", [5])]
    watch = watched(Call(script), hang=5.0)
    assert watch.longest_measure_gap == pytest.approx(10.0)


def test_a_frozen_collector_does_not_blame_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(liveness, "MEASURE_GAP_SECONDS", 0.2)
    freezes = Freezes()
    # The agent kept beating while the collector was frozen: its own clock says 0.1 s.
    script = [("progress", MEASURE, 1, 1.0), ("freeze", 0.6), ("progress", MEASURE, 2, 1.1)]
    watch = watched(Call([*script, ("result", [5])], freezes), hang=0.3, freezes=freezes)
    assert not watch.fired  # the hang timer found the collector frozen, and waited on
    assert watch.longest_measure_gap < 0.2
    assert watch.collector_frozen == pytest.approx(0.6, abs=0.1)


def test_a_collector_busy_with_its_own_work_does_not_blame_the_agent() -> None:
    """Its loop stalled (a display write blocked, say) while its clock ticked: the agent's
    events wait in the call, and their gaps are the agent's own."""
    script = [("progress", MEASURE, 1, 1.0), ("progress", MEASURE, 2, 1.5), ("result", [5])]
    watch = CellWatch(Call(script), 0.3, clock=Freezes())  # type: ignore[arg-type]
    for event in watch.events():
        if event.progress.iterations_done == 1:
            time.sleep(0.7)
    watch.stop()
    assert not watch.fired
    assert watch.longest_measure_gap == pytest.approx(0.5)
    assert not watch.collector_frozen


def test_a_collector_frozen_while_busy_with_an_event_blames_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Frozen while it handled an event, not while it waited: the agent's next events waited
    in the call, so the wait was short, yet the collector did not watch for 0.6 s."""
    monkeypatch.setattr(liveness, "MEASURE_GAP_SECONDS", 0.2)
    freezes = Freezes()
    script = [("progress", MEASURE, 1, 1.0), ("progress", MEASURE, 2, 1.1), ("result", [5])]
    watch = CellWatch(Call(script), 0.3, clock=freezes)  # type: ignore[arg-type]
    for event in watch.events():
        if event.progress.iterations_done == 1:
            now = time.monotonic()
            freezes.freezes.append((now, now + 0.6))
            time.sleep(0.6)
    watch.stop()
    assert not watch.fired
    assert watch.longest_measure_gap < 0.2
    assert watch.collector_frozen == pytest.approx(0.6, abs=0.1)


def test_own_clock_counts_late_ticks_and_a_freeze_under_way() -> None:
    clock = OwnClock(tick_seconds=3600)  # its thread sleeps: the test ticks
    start = time.monotonic()
    clock.tick(start + 0.2)
    clock.tick(start + 5.2)  # 5 s late: frozen
    assert clock.frozen_within(start, start + 5.3) == pytest.approx(5.0)
    assert clock.frozen_within(start + 1.2, start + 2.2) == pytest.approx(1.0)
    assert clock.frozen_within(start + 5.2, start + 5.3) == 0.0
    # Not ticked since start + 5.2: asked at start + 8.2, the freeze is under way.
    assert clock.frozen_within(start + 6.2, start + 8.2) == pytest.approx(2.0)


# run_all with fake agents whose calls follow a script per cell ----------------------------

_pids = itertools.count(2000)


@dataclass
class Client:
    scripts: list[list[tuple[Any, ...]]]  # one per Run, shared by the agent's processes
    freezes: Freezes
    pid: int = field(default_factory=lambda: next(_pids))
    closed: bool = False

    def run(self, request: agent_pb2.RunRequest, timeout: float | None) -> Call:
        script = self.scripts.pop(0)
        return Call([("progress", MEASURE, 0, 0.5), *script], self.freezes, request.run_id)

    def describe(self) -> agent_pb2.DescribeResponse:
        return describe(self.pid)

    def cancel(self, run_id: str) -> None:
        pass

    def healthy(self) -> bool:
        return not self.closed

    def close(self) -> None:
        self.closed = True


def describe(pid: int) -> agent_pb2.DescribeResponse:
    return agent_pb2.DescribeResponse(
        spec_version="1.6",
        pid=pid,
        identity=agent_pb2.AgentIdentity(name="a", framework="fake"),
        threads=agent_pb2.ThreadSettings(intra_op_threads=1),
        workloads=[
            agent_pb2.WorkloadSupport(
                name="gemm",
                phases=[PHASE_VALUES["infer"]],
                dtypes=[DTYPE_VALUES["float32"]],
                modes=["eager"],
            )
        ],
    )


@dataclass
class Recorder:
    rows: list[dict[str, Any]] = field(default_factory=list)
    samples: list[list[int]] = field(default_factory=list)

    def record(self, row: dict[str, Any], samples: Any, *_: Any) -> None:
        self.rows.append(row)
        self.samples.append(list(samples))


class Display:
    def __init__(self) -> None:
        self.notes: list[str] = []

    def cell_started(self, *_: Any) -> None:
        pass

    def cell_progress(self, *_: Any) -> None:
        pass

    def cell_finished(self, *_: Any) -> None:
        pass

    def note(self, agent: str, text: str) -> None:
        self.notes.append(text)


def sweep(
    scripts: list[list[tuple[Any, ...]]], cells: int, hang: float | None = 5.0
) -> tuple[list[dict[str, Any]], list[list[int]], list[str], list[int]]:
    """Rows, samples and notes of `cells` gemm cells of one agent the collector started; the
    pids of the processes started."""
    freezes = Freezes()
    pids: list[int] = []

    def start(threads: int = 0) -> AgentHandle:
        client = Client(scripts, freezes)
        pids.append(client.pid)
        return AgentHandle(Instance("a"), "fake:0", client, threads=threads)  # type: ignore[arg-type]

    batches = ",".join(str(b) for b in range(1, cells + 1))
    selection = build_selection(CATALOGUE, workloads="gemm", phases="infer", batch_sizes=batches)
    handle = start()
    item = AgentWork(handle, describe(pids[0]), [], start)
    item.cells = plan_cells("a", item.describe, CATALOGUE, selection)
    recorder, display = Recorder(), Display()
    ctx = RunContext("r", CATALOGUE, selection, recorder, display, 600.0)  # type: ignore[arg-type]
    ctx.hang_timeout_seconds = hang
    original = liveness.own_clock
    liveness.own_clock = lambda: freezes  # type: ignore[assignment,return-value]
    try:
        run_all([item], ctx)
    finally:
        liveness.own_clock = original
    return recorder.rows, recorder.samples, display.notes, pids


OK = [("result", [1000] * 10)]  # the request's default min_iterations


def test_a_stuck_measuring_thread_fails_as_hung_and_the_agent_is_restarted() -> None:
    stuck = [("progress", MEASURE, 3, 1.0), ("beat", None)]
    rows, _, _, pids = sweep([OK, stuck, OK], 3, hang=0.3)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert rows[1]["error_code"] == "HUNG"
    assert rows[1]["error"].startswith("agent a sent heartbeats but made no progress for 0.3 s")
    assert len(pids) == 2 and rows[2]["agent_pid"] == pids[1]  # a fresh process, the rest ok


def test_a_gap_while_measuring_fails_the_cell_and_keeps_its_samples(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fwbench.collector.run import call

    monkeypatch.setattr(call, "MEASURE_GAP_SECONDS", 0.2)
    samples_ns = [1000] * 9 + [300_000_000]
    stalled = [("sleep", 0.3), ("result", samples_ns)]
    rows, samples, _, pids = sweep([OK, stalled, OK], 3)
    assert [r["status"] for r in rows] == ["ok", "failed", "ok"]
    assert rows[1]["error_code"] == "STALLED" and rows[1]["n"] == 10
    assert "a sample may span the stall; its 10 samples are kept" in rows[1]["error"]
    assert "longest 0.3 s, median 1e-06 s" in rows[1]["error"]
    assert samples[1] == samples_ns
    assert len(pids) == 1  # the agent was not blamed for more than the cell


def test_a_frozen_collector_measures_the_cell_again_and_leaves_the_agent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(liveness, "MEASURE_GAP_SECONDS", 0.2)
    frozen = [("freeze", 0.5), *OK]
    rows, _, notes, pids = sweep([OK, frozen, OK, OK], 3, hang=0.3)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert len(pids) == 1  # never killed
    [note] = notes
    assert note.startswith("the collector itself was stopped for 0.5 s during this cell")
    assert note.endswith("the agent is not blamed and was not stopped: measuring the cell again")


def test_a_collector_frozen_twice_in_a_cell_fails_it_naming_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(liveness, "MEASURE_GAP_SECONDS", 0.2)
    frozen = [("freeze", 0.5), *OK]
    rows, _, _, pids = sweep([frozen, frozen, OK], 2, hang=0.3)
    assert [r["status"] for r in rows] == ["failed", "ok"]
    assert rows[0]["error_code"] == "COLLECTOR_FROZEN"
    assert rows[0]["error"].startswith("the collector itself was stopped for 0.5 s")
    assert len(pids) == 1


def test_a_cell_timeout_restarts_an_agent_the_collector_started() -> None:
    """A run that does not stop at the deadline (a stuck step) would make every later cell
    wait and fail as busy: a fresh process measures them."""
    rows, _, _, pids = sweep([[("deadline",)], OK], 2)
    assert [r["status"] for r in rows] == ["failed", "ok"]
    assert rows[0]["error_code"] == "DEADLINE_EXCEEDED"
    assert len(pids) == 2 and rows[1]["agent_pid"] == pids[1]
