"""A world's client (launchers/world.py starts the world): Describe checked across the ranks,
and one Run on every rank, fanned out, watched as one call, and combined into one result
(run/combine.py). Its threads that only watch run at SCHED_IDLE (idle_class.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import AgentHandle
from fwbench.collector.launchers.idle_class import (
    idle_class,
    idle_grpc_threads,
    restore_grpc_threads,
)
from fwbench.spec import startup


class WorldError(grpc.RpcError):
    """A rank failed or broke ranks: the world's Run fails with the rank's status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


# Statuses every rank gives alike before any work starts (agent.proto): the world is intact.
REFUSALS = frozenset(
    {
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.FAILED_PRECONDITION,
    }
)
DRAIN_SECONDS = 5.0  # after a rank failed: how long the others get to end their calls


def rank_run_id(run_id: str, rank: int) -> str:
    """The id of one rank's part of a world's Run (each rank cancels and answers its own)."""
    return f"{run_id}-rank{rank}"


class WorldCall:
    """One Run on every rank. The call beats (relays rank 0's progress) only once every rank
    has sent something since the last beat, so one hung rank silences the world and the hang
    watch fires; besides, the first rank to report its timed loop is relayed at once (the
    collector stops scraping the ranks then: run/world_telemetry.py). The first rank to fail
    cancels the others; a failure that is not a refusal every rank gave alike breaks the
    world (ranks may be blocked in a collective): the call fails UNAVAILABLE, the client is
    no longer healthy, and the run starts a fresh world. When every rank has answered: one
    combined RunResult (run/combine.py). What only watches the ranks runs at SCHED_IDLE
    (idle_class(), idle_grpc_threads()), off the CPUs the ranks step on."""

    def __init__(
        self, client: WorldClient, request: agent_pb2.RunRequest, timeout: float | None
    ) -> None:
        self.client, self.request = client, request
        self._events: list[tuple[int, object]] = []
        self._ready = threading.Condition()
        self._calls: list[Any] = [None] * len(client.ranks)
        self._refused: list[BaseException] = []  # a call that could not even start
        started = threading.Barrier(len(client.ranks) + 1)
        for index in range(len(client.ranks)):
            threading.Thread(
                target=self._pump,
                args=(index, timeout, started),
                daemon=True,
                name=f"fwbench-world-rank{index}",
            ).start()
        started.wait()  # every rank's call exists: cancel() reaches them all
        if self._refused:
            self.cancel()
            raise self._refused[0]

    def _pump(self, index: int, timeout: float | None, started: threading.Barrier) -> None:
        """Starts rank `index`'s call and relays its events from a thread at SCHED_IDLE
        (idle_class()): the waits that poll the call ten times a second are this thread's, and
        gRPC's channel thread that the call starts (the channel's first call in flight)
        inherits the class; both end with the call."""
        idle_class()
        try:
            own = agent_pb2.RunRequest()
            own.CopyFrom(self.request)
            own.run_id = rank_run_id(self.request.run_id, index)
            self._calls[index] = self.client.ranks[index].client.run(own, timeout)
        except BaseException as error:  # noqa: BLE001 (raised in the caller's thread, as there)
            self._refused.append(error)
            return
        finally:
            started.wait()
        try:
            for event in self._calls[index]:
                self._put(index, event)
        except grpc.RpcError as error:
            self._put(index, error)
        except Exception as error:  # noqa: BLE001 (reported as the rank's failure)
            self._put(index, WorldError(grpc.StatusCode.INTERNAL, str(error)))
        self._put(index, None)

    def _put(self, index: int, item: object) -> None:
        with self._ready:
            self._events.append((index, item))
            self._ready.notify_all()

    def _next(self, timeout: float | None = None) -> tuple[int, object] | None:
        with self._ready:
            if not self._ready.wait_for(lambda: bool(self._events), timeout):
                return None
            return self._events.pop(0)

    def cancel(self) -> None:
        for call in self._calls:
            if call is not None:
                call.cancel()

    def __iter__(self) -> Iterator[agent_pb2.RunResponse]:
        results: dict[int, agent_pb2.RunResult] = {}
        quieted: list[bool] = []
        try:
            yield from self._relay(results, quieted)
        finally:
            if any(quieted):
                restore_grpc_threads()
        ordered = [results[i] for i in sorted(results)]
        self.client.last_results = ordered
        if len(ordered) == len(self._calls):
            yield agent_pb2.RunResponse(result=self.client.combine(self.request, ordered))

    def _relay(
        self, results: dict[int, agent_pb2.RunResult], quieted: list[bool]
    ) -> Iterator[agent_pb2.RunResponse]:
        """The ranks' events until every rank has answered, their results into `results`;
        from the first rank's timed loop on, this process's gRPC threads at SCHED_IDLE
        (`quieted` says whether any is)."""
        finished: set[int] = set()
        heard: set[int] = set()
        measuring = False
        last = agent_pb2.RunResponse(progress=agent_pb2.Progress(run_id=self.request.run_id))
        while len(finished) < len(self._calls):
            index, item = self._next()  # type: ignore[misc]
            if item is None:
                finished.add(index)
            elif isinstance(item, grpc.RpcError):
                raise self._failed(index, item, finished)
            elif not isinstance(item, agent_pb2.RunResponse):
                raise WorldError(grpc.StatusCode.INTERNAL, f"rank {index}: {item!r}")
            elif item.HasField("result"):
                results[index] = item.result
            else:
                if index == 0:
                    last = item
                heard.add(index)
                begun = item.progress.stage == agent_pb2.STAGE_MEASURE and not measuring
                if begun:  # the first rank in its timed loop: the world's has begun
                    measuring = True
                    quieted.append(idle_grpc_threads())
                if len(heard) == len(self._calls):
                    heard.clear()
                    yield last
                elif begun:
                    yield item

    def _failed(self, index: int, error: grpc.RpcError, finished: set[int]) -> WorldError:
        """Cancels every rank, gives them DRAIN_SECONDS to end, and says what failed."""
        self.cancel()
        code, details = _status(error)
        codes = {index: code}
        deadline = time.monotonic() + DRAIN_SECONDS
        while len(finished) < len(self._calls) and time.monotonic() < deadline:
            got = self._next(max(deadline - time.monotonic(), 0.0))
            if got is None:
                break
            other, item = got
            if item is None:
                finished.add(other)
            elif isinstance(item, grpc.RpcError):
                codes[other] = _status(item)[0]
        said = f"rank {index}: {code.name}: {details}"
        if len(codes) == len(self._calls) and set(codes.values()) == {code} and code in REFUSALS:
            return WorldError(code, said)
        if code == grpc.StatusCode.CANCELLED and index not in codes:
            return WorldError(code, said)
        self.client.broken = (
            f"{said}; the world's other ranks cannot go on without it (a collective waits for "
            "every rank), so the world is stopped and started again"
        )
        return WorldError(grpc.StatusCode.UNAVAILABLE, self.client.broken)


def _status(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    code = error.code() if callable(getattr(error, "code", None)) else None
    details = error.details() if callable(getattr(error, "details", None)) else ""
    return code or grpc.StatusCode.UNKNOWN, details or ""


# How ranks' results become one (run/combine.py, which checks them: the run layer's job).
Combine = Callable[[agent_pb2.RunRequest, Sequence[agent_pb2.RunResult]], agent_pb2.RunResult]


class WorldClient:
    """The AgentClient calls the run uses, over every rank: Describe checks that the ranks are
    one world of one agent; Run fans out and combines (WorldCall)."""

    def __init__(self, instance: Instance, ranks: list[AgentHandle], combine: Combine) -> None:
        self.instance, self.ranks, self.combine = instance, ranks, combine
        self.name = str(instance)
        self.address = ranks[0].address
        self.last_results: list[agent_pb2.RunResult] = []
        self.broken = ""  # why the world cannot run another cell (WorldCall._failed)

    def describe(self, timeout_seconds: float = 30) -> agent_pb2.DescribeResponse:
        replies = [rank.client.describe(timeout_seconds) for rank in self.ranks]
        first = replies[0]
        for index, reply in enumerate(replies):
            world = reply.world
            if world.world_size != len(self.ranks) or world.rank != index:
                raise AgentUnavailable(
                    f"{self.name}: the agent at {self.ranks[index].address} says it is rank "
                    f"{world.rank} of {world.world_size}, not rank {index} of "
                    f"{len(self.ranks)} (does it read WORLD_SIZE and RANK?)"
                )
            devices, expected = max(world.local_devices, 1), max(self.instance.devices, 1)
            if devices != expected:
                raise AgentUnavailable(
                    f"{self.name}: the agent at {self.ranks[index].address} spreads its step "
                    f"over {devices} device(s), not {expected} (does it read "
                    f"{startup.LOCAL_DEVICES}? protocol 1.4)"
                )
            if reply.identity != first.identity:
                raise AgentUnavailable(f"{self.name}: rank {index} is another agent than rank 0")
        return first

    def healthy(self) -> bool:
        return not self.broken and all(rank.client.healthy() for rank in self.ranks)

    def run(self, request: agent_pb2.RunRequest, timeout_seconds: float | None) -> WorldCall:
        return WorldCall(self, request, timeout_seconds)

    def cancel(self, run_id: str = "") -> bool:
        return any(
            rank.client.cancel(rank_run_id(run_id, index) if run_id else "")
            for index, rank in enumerate(self.ranks)
        )

    def close(self) -> None:
        for rank in self.ranks:
            rank.client.close()
