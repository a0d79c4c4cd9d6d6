"""The conformance suite's frame: what a check sees of its agent (Target), what it returns
(Outcome), and the runner that times each check and turns its exceptions into a result.

A check is a named function of the Target: it returns (a note for the table, or None) when
the agent keeps the protocol, raises Failed naming what it broke, or Skipped saying why the
check does not apply. Anything else it raises is a failure too (the agent made the check
itself go wrong: a stream that never ends, a reply that does not parse)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NoReturn

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.run.liveness import (
    HANG_SECONDS,
    STALL_GAP_SECONDS,
    CellWatch,
    StallWatch,
    sends_heartbeats,
)
from fwbench.spec import HEARTBEAT_SECONDS, Catalogue

PASS, FAIL, SKIP = "pass", "fail", "skip"
# A refused request never starts work (agent.proto): its status comes at once, or never.
REFUSAL_SECONDS = 30.0


class Failed(Exception):
    """The agent broke the protocol; the message says how."""


class Hung(Failed):
    """The agent answered nothing within a check's deadline; the checks after it are not run."""

    state = "hung"  # "not run: the agent STATE in CHECK"


class Stuck(Hung):
    """A Run stream whose progress stood still (heartbeats, the same stage and iterations_done)
    for the collector's hang limit: `collector run` cancels such a cell as hung, and every
    later check would wait for the same stuck thread, so they are not run either."""

    state = "is stuck"


class Skipped(Exception):
    """The check does not apply to this agent; the message says why."""


@dataclass(frozen=True)
class Outcome:
    check: str
    result: str  # PASS, FAIL or SKIP
    reason: str  # why it failed or was skipped; a note when it passed
    seconds: float


@dataclass
class Target:
    """The agent under test and what the checks learn of it on the way."""

    client: AgentClient
    catalogue: Catalogue
    metrics_address: str = ""  # host:port of /metrics as this host reaches it; "" = derive
    expected_name: str = ""  # a declared agent's name: Describe must say it
    extras: frozenset[str] = frozenset()  # workloads outside the catalogue the user allows
    cell_timeout_seconds: float = 300.0
    # Variables the agent runs with and must report (FWBENCH_REPORT_VARIABLES names them).
    reported_variables: dict[str, str] = field(default_factory=dict)
    describe: agent_pb2.DescribeResponse | None = None
    notes: dict[str, object] = field(default_factory=dict)
    hung_in: str = ""  # the check in which the agent hung: the later ones are not run
    hung_as: str = Hung.state  # or Stuck's
    other: AgentClient | None = None  # a second caller (its own client id and connection)

    def described(self) -> agent_pb2.DescribeResponse:
        if self.describe is None:
            raise Skipped("needs Describe, which failed")
        return self.describe

    def silence_seconds(self) -> float | None:
        """How long a Run stream may send nothing: the collector's stall limit for an agent
        that sends heartbeats, else None (only the call's own deadline)."""
        heartbeats = self.describe is not None and sends_heartbeats(self.describe)
        return STALL_GAP_SECONDS if heartbeats else None

    def hang_seconds(self) -> float | None:
        """How long a Run stream may go without progress (the same stage and iterations_done,
        heartbeats or not): the collector's hang limit where there is a heartbeat, else None."""
        return HANG_SECONDS if self.silence_seconds() else None

    def authenticated_callers(self) -> bool:
        """Whether this suite reaches the agent with a token or a client certificate: such an
        agent may trust every caller (Cancel without an id, the busy refusal's run id)."""
        security = self.client.security
        return bool(security.token or security.cert)

    def other_caller(self) -> AgentClient:
        """A second client of the agent: another x-fwbench-client id, another connection."""
        if self.other is None:
            client = self.client
            self.other = AgentClient(client.name, client.address, client.security)
        return self.other

    def close(self) -> None:
        if self.other is not None:
            self.other.close()
            self.other = None

    def support(self, name: str) -> agent_pb2.WorkloadSupport:
        return next(w for w in self.described().workloads if w.name == name)


Check = tuple[str, Callable[[Target], str | None]]


def run_checks(
    target: Target, checks: Iterable[Check], report: Callable[[Outcome], None]
) -> list[Outcome]:
    outcomes = []
    for name, check in checks:
        start = time.monotonic()
        try:
            if target.hung_in:
                raise Skipped(f"not run: the agent {target.hung_as} in {target.hung_in!r}")
            note = check(target)
            result, reason = PASS, note or ""
        except Hung as hung:
            result, reason = FAIL, f"{hung}; the checks after this one are not run"
            target.hung_in, target.hung_as = name, hung.state
        except Failed as failure:
            result, reason = FAIL, str(failure)
        except Skipped as skip:
            result, reason = SKIP, str(skip)
        except grpc.RpcError as error:
            result, reason = FAIL, f"unexpected {status_text(error)}"
        except Exception as error:  # noqa: BLE001 (the check's failure, reported as such)
            result, reason = FAIL, f"{type(error).__name__}: {error}"
        outcome = Outcome(name, result, reason, time.monotonic() - start)
        outcomes.append(outcome)
        report(outcome)
    return outcomes


def status_text(error: grpc.RpcError) -> str:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    return f"{code.name if code else 'error'} ({details or 'no message'})"


def call_failed(what: str, error: grpc.RpcError) -> Failed:
    """The failure of a unary call: Hung when it ran past its deadline."""
    kind = Hung if error.code() == grpc.StatusCode.DEADLINE_EXCEEDED else Failed
    return kind(f"{what}: {status_text(error)}")


def reraise(error: Exception) -> NoReturn:
    raise error


def new_run_id() -> str:
    return f"conformance-{uuid.uuid4().hex}"


def run_to_end(
    target: Target,
    request: agent_pb2.RunRequest,
    timeout: float | None = None,
    client: AgentClient | None = None,
) -> tuple[list[agent_pb2.Progress], agent_pb2.RunResult]:
    """The Run stream's progress events and its one RunResult; raises grpc.RpcError for a
    status, Failed for a stream without exactly one RunResult at its end, Hung for one silent
    for target.silence_seconds(), Stuck for one without progress for target.hang_seconds()."""
    progress, result, _ = run_watched(target, request, timeout, client)
    return progress, result


def run_watched(
    target: Target,
    request: agent_pb2.RunRequest,
    timeout: float | None = None,
    client: AgentClient | None = None,
    slack: float = 0.0,
) -> tuple[list[agent_pb2.Progress], agent_pb2.RunResult, CellWatch]:
    """run_to_end's, and the watch that applied `collector run`'s rules to the stream
    (run/liveness.py): its longest_gap is the longest silence the agent is to blame for, the
    suite's own freezes left out. `slack` lengthens the silence a Hung waits for (a check that
    made the steps long on purpose judges their silence itself)."""
    progress: list[agent_pb2.Progress] = []
    results: list[agent_pb2.RunResult] = []
    stream = (client or target.client).run(request, timeout or target.cell_timeout_seconds)
    silence = target.silence_seconds()
    silence = silence + slack if silence else None
    watch = StallWatch(stream, silence)
    progress_watch = CellWatch(stream, target.hang_seconds())
    try:
        for event in progress_watch.events():
            watch.event()
            if results:
                raise Failed("the Run stream went on after its RunResult")
            if event.HasField("result"):
                results.append(event.result)
            elif event.HasField("progress"):
                progress.append(event.progress)
            else:
                raise Failed("a RunResponse with neither progress nor result")
    except grpc.RpcError:
        if watch.fired:
            raise Hung(silent(silence or 0, len(progress))) from None
        if progress_watch.fired:
            raise Stuck(stuck("the Run call", progress_watch.fired)) from None
        raise
    finally:
        watch.stop()
        progress_watch.stop()
    if not results:
        raise Failed(
            f"the Run stream ended OK without a RunResult (after {len(progress)} progress events)"
        )
    return progress, results[0], progress_watch


def silent(seconds: float, events: int) -> str:
    """Why a Run call silent for `seconds` after `events` events counts as hung."""
    return (
        f"the Run call sent nothing for {seconds:g} s (after {events} progress events): hung "
        "(agent.proto: a refusal comes at once, an active run sends a Progress at least every "
        f"{HEARTBEAT_SECONDS:g} s; `collector run` fails a cell silent for "
        f"{STALL_GAP_SECONDS:g} s)"
    )


def stuck(what: str, fired: str) -> str:
    """Why `what` (a Run call) counts as stuck: `fired`, the collector's own CellWatch's words,
    which name the stage and count it stood at."""
    return (
        f"{what} {fired}; `collector run` cancels a cell whose progress (stage, "
        f"iterations_done) stands still for {HANG_SECONDS:g} s as hung"
    )


def expect_status(
    target: Target,
    request: agent_pb2.RunRequest,
    code: grpc.StatusCode,
    naming: str = "",
    timeout: float | None = REFUSAL_SECONDS,
    client: AgentClient | None = None,
) -> str:
    """Runs `request` (as `client`, by default the suite's) and requires the status `code`
    with `naming` in its message; returns the message."""
    try:
        run_to_end(target, request, timeout, client)
    except grpc.RpcError as error:
        got = error.code()
        if got != code:
            raise Failed(f"expected {code.name}, got {status_text(error)}") from None
        details = error.details() or ""
        if naming and naming not in details:
            raise Failed(
                f"{code.name} as expected, but the message does not name {naming!r}: {details!r}"
            ) from None
        return details[:120]
    raise Failed(f"expected {code.name}, the run succeeded")
