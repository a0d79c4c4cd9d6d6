"""One Run on every rank of a world (launchers/world.py): fanned out, watched as one call, and
combined into one result (run/combine.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import grpc

from fwbench.agent.v1 import agent_pb2

if TYPE_CHECKING:
    from fwbench.collector.launchers.world import WorldClient


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
    combined RunResult (run/combine.py)."""

    def __init__(
        self, client: WorldClient, request: agent_pb2.RunRequest, timeout: float | None
    ) -> None:
        self.client, self.request = client, request
        self._events: list[tuple[int, object]] = []
        self._ready = threading.Condition()
        self._calls: list[Any] = []
        for index, rank in enumerate(client.ranks):
            own = agent_pb2.RunRequest()
            own.CopyFrom(request)
            own.run_id = rank_run_id(request.run_id, index)
            self._calls.append(rank.client.run(own, timeout))
        for index in range(len(self._calls)):
            threading.Thread(target=self._pump, args=(index,), daemon=True).start()

    def _pump(self, index: int) -> None:
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
            call.cancel()

    def __iter__(self) -> Iterator[agent_pb2.RunResponse]:
        results: dict[int, agent_pb2.RunResult] = {}
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
                if len(heard) == len(self._calls):
                    heard.clear()
                    yield last
                elif item.progress.stage == agent_pb2.STAGE_MEASURE and not measuring:
                    yield item  # the first rank in its timed loop: the world's has begun
                measuring = measuring or item.progress.stage == agent_pb2.STAGE_MEASURE
        ordered = [results[i] for i in sorted(results)]
        self.client.last_results = ordered
        if len(ordered) == len(self._calls):
            yield agent_pb2.RunResponse(result=self.client.combine(self.request, ordered))

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
