"""An agent written from agent.proto alone (no fwbench runtime), that answers Run in a chosen
wrong way: the collector must store a failed cell that says the agent broke the protocol.

Run as a process: `python liar_agent.py MODE PORT_FILE`; it serves gRPC health too."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.spec import SPEC_VERSION

MODES = (
    "honest",
    "zero-samples",
    "negative-samples",
    "no-result",
    "wrong-run-id",
    "too-many",
    "own-threads",  # measures right, on one thread whatever was asked
)


class LiarAgent(agent_pb2_grpc.AgentServiceServicer):
    def __init__(self, mode: str) -> None:
        self.mode = mode

    def Describe(self, request: object, context: object) -> agent_pb2.DescribeResponse:  # noqa: N802
        return agent_pb2.DescribeResponse(
            spec_version=SPEC_VERSION,
            identity=agent_pb2.AgentIdentity(
                name=self.mode,  # each lie its own agent: one run holds them all
                framework="liar",
                framework_version="1",
                variant=self.mode,
            ),
            threads=agent_pb2.ThreadSettings(intra_op_threads=1, inter_op_threads=1),
            workloads=[
                agent_pb2.WorkloadSupport(
                    name="gemm",
                    phases=[agent_pb2.PHASE_INFER, agent_pb2.PHASE_TRAIN],
                    dtypes=[agent_pb2.DTYPE_FLOAT32],
                    modes=["eager"],
                    max_batch_size=1024,
                )
            ],
        )

    def Run(  # noqa: N802
        self, request: agent_pb2.RunRequest, context: object
    ) -> Iterator[agent_pb2.RunResponse]:
        yield agent_pb2.RunResponse(
            progress=agent_pb2.Progress(stage=agent_pb2.STAGE_MEASURE, iterations_done=1)
        )
        if self.mode == "no-result":
            return
        samples = [1_000_000] * max(request.min_iterations, 10)
        if self.mode == "zero-samples":
            samples = []
        elif self.mode == "negative-samples":
            samples = [-s for s in samples]
        elif self.mode == "too-many":
            samples = [1_000] * (request.max_iterations + 1)
        ended = time.time_ns()
        yield agent_pb2.RunResponse(
            result=agent_pb2.RunResult(
                run_id="someone-else" if self.mode == "wrong-run-id" else request.run_id,
                sample_nanoseconds=samples,
                measure_started_unix_nanoseconds=ended - sum(abs(s) for s in samples) - 1000,
                measure_ended_unix_nanoseconds=ended,
                settings=agent_pb2.EffectiveSettings(
                    dtype=request.dtype,
                    intra_op_threads=1 if self.mode == "own-threads" else request.threads or 1,
                    inter_op_threads=1,
                    mode="eager",
                ),
            )
        )

    def Cancel(self, request: object, context: object) -> agent_pb2.CancelResponse:  # noqa: N802
        return agent_pb2.CancelResponse(cancelled=False)


def serve(mode: str, port_file: Path) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    agent_pb2_grpc.add_AgentServiceServicer_to_server(LiarAgent(mode), server)
    checker = health.HealthServicer()
    checker.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    partial = port_file.with_suffix(".partial")  # renamed whole: never read half-written
    partial.write_text(json.dumps({"port": port}))
    partial.replace(port_file)
    server.wait_for_termination()


if __name__ == "__main__":
    serve(sys.argv[1], Path(sys.argv[2]))
