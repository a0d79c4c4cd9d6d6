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
from fwbench.spec import Catalogue

PASS, FAIL, SKIP = "pass", "fail", "skip"


class Failed(Exception):
    """The agent broke the protocol; the message says how."""


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
    describe: agent_pb2.DescribeResponse | None = None
    notes: dict[str, object] = field(default_factory=dict)

    def described(self) -> agent_pb2.DescribeResponse:
        if self.describe is None:
            raise Skipped("needs Describe, which failed")
        return self.describe

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
            note = check(target)
            result, reason = PASS, note or ""
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


def reraise(error: Exception) -> NoReturn:
    raise error


def new_run_id() -> str:
    return f"conformance-{uuid.uuid4().hex}"


def run_to_end(
    target: Target, request: agent_pb2.RunRequest, timeout: float | None = None
) -> tuple[list[agent_pb2.Progress], agent_pb2.RunResult]:
    """The Run stream's progress events and its one RunResult; raises grpc.RpcError for a
    status, Failed for a stream without exactly one RunResult at its end."""
    progress: list[agent_pb2.Progress] = []
    results: list[agent_pb2.RunResult] = []
    stream = target.client.run(request, timeout or target.cell_timeout_seconds)
    for event in stream:
        if results:
            raise Failed("the Run stream went on after its RunResult")
        if event.HasField("result"):
            results.append(event.result)
        elif event.HasField("progress"):
            progress.append(event.progress)
        else:
            raise Failed("a RunResponse with neither progress nor result")
    if not results:
        raise Failed(
            f"the Run stream ended OK without a RunResult (after {len(progress)} progress events)"
        )
    return progress, results[0]


def expect_status(
    target: Target,
    request: agent_pb2.RunRequest,
    code: grpc.StatusCode,
    naming: str = "",
    timeout: float | None = None,
) -> str:
    """Runs `request` and requires the status `code` with `naming` in its message."""
    try:
        run_to_end(target, request, timeout)
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
