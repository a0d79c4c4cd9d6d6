"""Agents for the conformance suite's own tests, each a real gRPC server on a loopback port:
the runtime's AgentService with the framework-free FakePlugin (tests/runtime/fake_plugin.py),
either as it is (it keeps the protocol) or with one deliberate defect, so that a test can
assert that the suite fails that agent on that defect, with its reason, and on nothing else."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.handlers import SERVICE, add_agent_service
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
    def __init__(self) -> None:
        identity = agent_pb2.AgentIdentity(
            name="fake-cpu", framework="fake", framework_version="1.2.3", variant="cpu"
        )
        super().__init__(ThreadedFake(), load_catalogue(), identity, AgentMetrics({}))


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
}


def serve(kind: str) -> tuple[grpc.Server, AgentServicer, int]:
    """Starts the agent `kind` on a free loopback port: (server, servicer, port)."""
    servicer = AGENTS[kind]()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    add_agent_service(servicer, server)
    checker = health.HealthServicer()
    for service in ("", SERVICE):
        checker.set(service, health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, servicer, port
