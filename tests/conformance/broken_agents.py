"""Agents for the conformance suite's own tests, each a real gRPC server on a loopback port:
the runtime's AgentService with the framework-free FakePlugin (tests/runtime/fake_plugin.py),
either as it is (it keeps the protocol) or with one deliberate defect, so that a test can
assert that the suite fails that agent on that defect, with its reason, and on nothing else."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.handlers import SERVICE, add_agent_service
from fwbench.runtime.hostinfo import REPORT_VARIABLE
from fwbench.runtime.metrics import AgentMetrics
from fwbench.runtime.plugin import BuiltStep, WorkloadSpec
from fwbench.runtime.service import AgentServicer
from fwbench.spec import load_catalogue

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from fake_plugin import FakePlugin


class ThreadedFake(FakePlugin):
    """The fake, running with the intra-op threads a run asks for (the fake itself always
    says 1, which the suite rightly fails: a run's threads are the ones it asked for)."""

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        built = super().build(spec)
        settings = dataclasses.replace(built.settings, intra_op_threads=spec.threads or 1)
        return dataclasses.replace(built, settings=settings)


class Honest(AgentServicer):
    health = True  # serves grpc.health.v1

    def __init__(self, plugin: FakePlugin | None = None) -> None:
        identity = agent_pb2.AgentIdentity(
            name="fake-cpu", framework="fake", framework_version="1.2.3", variant="cpu"
        )
        super().__init__(plugin or ThreadedFake(), load_catalogue(), identity, AgentMetrics({}))

    def let_go(self) -> None:
        """At the test's end, before its process exits: nothing of this agent still waits."""


class NoResult(Honest):
    """Its Run stream ends OK after the progress events, without a RunResult."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        for event in super().Run(request, context):
            if event.HasField("result"):
                return
            yield event


class UnknownWorkloadOk(Honest):
    """Measures gemm when asked for a workload it does not know, instead of NOT_FOUND."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        if request.workload not in load_catalogue().workloads:
            request.workload = "gemm"
        yield from super().Run(request, context)


class UnknownWorkloadInternal(Honest):
    """Answers an unknown workload with INTERNAL."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        if request.workload not in load_catalogue().workloads:
            context.abort(grpc.StatusCode.INTERNAL, "KeyError: " + request.workload)
        yield from super().Run(request, context)


class NextMajor(Honest):
    """Speaks protocol 2.0."""

    def Describe(self, request, context) -> agent_pb2.DescribeResponse:  # noqa: N802
        reply = super().Describe(request, context)
        reply.spec_version = "2.0"
        return reply


class IgnoresCancel(Honest):
    """Says it cancelled nothing, whatever the run id."""

    def Cancel(self, request, context) -> agent_pb2.CancelResponse:  # noqa: N802
        return agent_pb2.CancelResponse(cancelled=False)


class WrongDtype(Honest):
    """Reports float64 as the dtype that ran, whatever was asked."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        for event in super().Run(request, context):
            if event.HasField("result"):
                event.result.settings.dtype = agent_pb2.DTYPE_FLOAT64
            yield event


class ReasonForOffered(Honest):
    """Gives a reason for not offering gemm, which it offers."""

    def Describe(self, request, context) -> agent_pb2.DescribeResponse:  # noqa: N802
        reply = super().Describe(request, context)
        reply.unsupported_reasons["gemm"] = "no gemm here"
        return reply


class OwnFamily(Honest):
    """Names its own framework as its family."""

    def Describe(self, request, context) -> agent_pb2.DescribeResponse:  # noqa: N802
        reply = super().Describe(request, context)
        reply.identity.family = reply.identity.framework
        return reply


class NoHeartbeat(Honest):
    """Sends a Progress only as a stage begins: nothing during a stage however long it lasts
    (no heartbeat, no progress within the timed loop)."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        stage = None
        for event in super().Run(request, context):
            if event.HasField("progress") and event.progress.stage == stage:
                continue
            stage = event.progress.stage if event.HasField("progress") else stage
            yield event


class StuckLoop(Honest):
    """Its heartbeat goes on while its measuring loop stands still: every Progress of
    STAGE_MEASURE says the count of the first (a step that never returns, on a thread of its
    own, while another sends the heartbeat)."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        first = None
        for event in super().Run(request, context):
            if event.HasField("progress") and event.progress.stage == agent_pb2.STAGE_MEASURE:
                first = event.progress.iterations_done if first is None else first
                event.progress.iterations_done = first
            yield event


class PerStepProgress(Honest):
    """Sends a Progress only when its stage or iterations_done changes: the runtime's heartbeat
    (the last Progress repeated every interval) never goes out, so a long step is silent."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        last = None
        for event in super().Run(request, context):
            if event.HasField("progress"):
                key = (event.progress.stage, event.progress.iterations_done)
                if key == last:
                    continue
                last = key
            yield event


class StuckFake(ThreadedFake):
    """The first step of the first cell it builds blocks until `release` is set."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.release = release
        self.stuck = False

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        built = super().build(spec)
        if self.stuck:
            return built
        self.stuck = True
        step = built.step

        def stuck_step() -> object:
            self.release.wait()
            return step()

        return dataclasses.replace(built, step=stuck_step)


class StuckThread(Honest):
    """Its measuring thread never returns from the first step of its first cell, while the
    runtime's relay goes on sending the heartbeat: the last Progress (STAGE_FIRST_ITERATION, 0
    iterations) every interval, as a step stuck on a lock or a device that never answers. The
    thread is let go at the test's end (an in-process thread left waiting keeps the test's
    process from exiting)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        super().__init__(StuckFake(self.release))

    def let_go(self) -> None:
        self.release.set()


class CancelsAnyCaller(Honest):
    """A Cancel without run id stops the active run, whoever sends it."""

    def Cancel(self, request, context) -> agent_pb2.CancelResponse:  # noqa: N802
        active = self._active
        if not request.run_id and active is not None:
            active.cancel.set()
            return agent_pb2.CancelResponse(cancelled=True, run_id=active.run_id)
        return super().Cancel(request, context)


class RevealsRunId(Honest):
    """Names the active run's id in its busy refusal, to any caller."""

    def _busy_with(self, context) -> str:
        active = self._active
        return f"run {active.run_id}" if active else "another run"


class SkipsReportedVariables(Honest):
    """Leaves out of Describe.environment the variables FWBENCH_REPORT_VARIABLES names."""

    def Describe(self, request, context) -> agent_pb2.DescribeResponse:  # noqa: N802
        reply = super().Describe(request, context)
        named = os.environ.get(REPORT_VARIABLE, "").split(",")
        for name in named:
            reply.environment.pop(name.strip(), None)
        return reply


class BusyBeforeValidity(Honest):
    """Refuses any Run while busy with FAILED_PRECONDITION, before checking the request."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        if self.busy():
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, "agent is busy with another run")
        yield from super().Run(request, context)


class Hangs(Honest):
    """Refuses a bad request as it should, then sends nothing: its Run never ends until the
    client gives up (a deadlocked agent)."""

    def Run(self, request, context) -> Iterator[agent_pb2.RunResponse]:  # noqa: N802
        events = super().Run(request, context)
        next(events)  # the request's checks (a refusal aborts here); the run starts
        while context.is_active():
            time.sleep(0.1)
        events.close()
        yield from ()


class NoHealth(Honest):
    """Serves AgentService alone: no grpc.health.v1."""

    health = False


AGENTS = {
    "honest": Honest,
    "reason-for-offered": ReasonForOffered,
    "own-family": OwnFamily,
    "no-result": NoResult,
    "unknown-workload-ok": UnknownWorkloadOk,
    "unknown-workload-internal": UnknownWorkloadInternal,
    "next-major": NextMajor,
    "ignores-cancel": IgnoresCancel,
    "wrong-dtype": WrongDtype,
    "no-heartbeat": NoHeartbeat,
    "stuck-loop": StuckLoop,
    "per-step-progress": PerStepProgress,
    "stuck-thread": StuckThread,
    "cancels-any-caller": CancelsAnyCaller,
    "reveals-run-id": RevealsRunId,
    "skips-reported-variables": SkipsReportedVariables,
    "busy-before-validity": BusyBeforeValidity,
    "hangs": Hangs,
    "no-health": NoHealth,
}


def serve(kind: str) -> tuple[grpc.Server, Honest, int]:
    """Starts the agent `kind` on a free loopback port: (server, servicer, port)."""
    servicer = AGENTS[kind]()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    add_agent_service(servicer, server)
    if servicer.health:
        checker = health.HealthServicer()
        for service in ("", SERVICE):
            checker.set(service, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, servicer, port
