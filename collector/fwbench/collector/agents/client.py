"""AgentClient: the collector's side of the protocol, over a real gRPC channel. Every call
carries the client's random id as `x-fwbench-client` (an agent lets a Cancel without a run id
stop only its caller's own run) and, with ChannelSecurity, a token; the channel is TLS when
the security settings say so."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fwbench.agent.v1 import agent_pb2, agent_pb2_grpc
from fwbench.collector.agents.security import ChannelSecurity
from fwbench.spec import SPEC_VERSION, versions_compatible
from fwbench.spec.metadata import CLIENT_ID

MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class AgentUnavailable(RuntimeError):
    """The agent cannot be reached or did not become healthy in time."""


class IncompatibleAgent(RuntimeError):
    """The agent speaks another major version of the protocol."""


class AgentClient:
    def __init__(self, name: str, address: str, security: ChannelSecurity | None = None) -> None:
        self.name = name
        self.address = address
        self.security = security or ChannelSecurity()
        self._metadata = ((CLIENT_ID, uuid.uuid4().hex), *self.security.metadata())
        options = [
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.enable_retries", 0),
            # Readiness is polled through the health service: a connection refused while
            # the agent starts (or by Docker's port proxy before anything listens behind
            # it) must be retried within a poll, not after gRPC's default 1-120 s backoff.
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
            *self.security.options(),
        ]
        self._channel = (
            grpc.secure_channel(address, self.security.credentials(), options=options)
            if self.security.tls
            else grpc.insecure_channel(address, options=options)
        )
        self._stub = agent_pb2_grpc.AgentServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._health = health_pb2_grpc.HealthStub(self._channel)

    def wait_healthy(
        self, timeout_seconds: float, alive: object = None, why: object = None
    ) -> None:
        """Blocks until the health service says SERVING; raises AgentUnavailable on timeout.

        `alive`, when given, is a zero-argument callable; False means stop waiting at once
        (the agent process died), saying what `why()` returns (the handle's exit reason)."""
        deadline = time.monotonic() + timeout_seconds
        last_error = "no answer"
        while time.monotonic() < deadline:
            if callable(alive) and not alive():
                said = f": {why()}" if callable(why) else ""
                raise AgentUnavailable(f"agent {self.name} exited before it became healthy{said}")
            try:
                reply = self._health.Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=2, metadata=self._metadata
                )
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
                last_error = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.RpcError as error:
                last_error = error.details() or error.code().name
                if self.security.refused(last_error):
                    raise AgentUnavailable(
                        f"cannot reach agent {self.name} at {self.address}: TLS refused "
                        f"({last_error})"
                    ) from None
            time.sleep(0.2)
        raise AgentUnavailable(
            f"cannot reach agent {self.name} at {self.address} within {timeout_seconds:.0f} s "
            f"({last_error}){self.security.hint(last_error)}"
        )

    def healthy(self) -> bool:
        try:
            reply = self._health.Check(
                health_pb2.HealthCheckRequest(service=""), timeout=2, metadata=self._metadata
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

    @property
    def channel(self) -> grpc.Channel:
        """The channel, for services besides AgentService (health, reflection)."""
        return self._channel

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """What every call sends: the client id and, when set, the token."""
        return self._metadata

    def describe_reply(self, timeout_seconds: float = 30) -> agent_pb2.DescribeResponse:
        """Describe as the agent answers it, any version; raises grpc.RpcError."""
        reply: agent_pb2.DescribeResponse = self._stub.Describe(
            agent_pb2.DescribeRequest(), timeout=timeout_seconds, metadata=self._metadata
        )
        return reply

    def describe(self, timeout_seconds: float = 30) -> agent_pb2.DescribeResponse:
        """Describe, refusing an agent of another protocol major version."""
        try:
            reply = self.describe_reply(timeout_seconds)
        except grpc.RpcError as error:
            hint = ""
            if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                hint = " (the token: --agent-token-file or $FWBENCH_AGENT_TOKEN_FILE)"
            raise AgentUnavailable(
                f"agent {self.name} at {self.address}: Describe failed: "
                f"{error.code().name} {error.details()}{hint}"
            ) from error
        if not versions_compatible(SPEC_VERSION, reply.spec_version):
            raise IncompatibleAgent(
                f"agent {self.name} at {self.address} speaks protocol {reply.spec_version!r}; "
                f"this collector speaks {SPEC_VERSION} (major versions must match)"
            )
        return reply

    def run(
        self, request: agent_pb2.RunRequest, timeout_seconds: float | None
    ) -> Iterator[agent_pb2.RunResponse]:
        """The Run stream; iterating raises grpc.RpcError on failure. Cancel it with cancel()
        or by closing the iterator."""
        stream: Iterator[agent_pb2.RunResponse] = self._stub.Run(
            request, timeout=timeout_seconds, metadata=self._metadata
        )
        return stream

    def inspect_model(
        self, request: agent_pb2.InspectModelRequest, timeout_seconds: float
    ) -> agent_pb2.ModelSignature:
        """A model file's signature (protocol 1.7); raises grpc.RpcError."""
        reply: agent_pb2.ModelSignature = self._stub.InspectModel(
            request, timeout=timeout_seconds, metadata=self._metadata
        )
        return reply

    def export_model(
        self, request: agent_pb2.ExportModelRequest, timeout_seconds: float
    ) -> agent_pb2.ExportModelResponse:
        """A model file written in another format by the agent (protocol 1.8); raises
        grpc.RpcError."""
        reply: agent_pb2.ExportModelResponse = self._stub.ExportModel(
            request, timeout=timeout_seconds, metadata=self._metadata
        )
        return reply

    def upload_model(
        self, chunks: Iterator[agent_pb2.ModelChunk], timeout_seconds: float
    ) -> agent_pb2.UploadModelResponse:
        """A file or folder sent to the agent, which answers where it keeps it (protocol
        1.9; fwbench/spec/uploads.py makes the chunks); raises grpc.RpcError."""
        reply: agent_pb2.UploadModelResponse = self._stub.UploadModel(
            chunks, timeout=timeout_seconds, metadata=self._metadata
        )
        return reply

    def cancel_reply(self, run_id: str = "") -> agent_pb2.CancelResponse:
        """Cancel as the agent answers it; raises grpc.RpcError."""
        reply: agent_pb2.CancelResponse = self._stub.Cancel(
            agent_pb2.CancelRequest(run_id=run_id), timeout=5, metadata=self._metadata
        )
        return reply

    def cancel(self, run_id: str = "") -> bool:
        try:
            return bool(self.cancel_reply(run_id).cancelled)
        except grpc.RpcError:
            return False

    def close(self) -> None:
        self._channel.close()
