"""Builds and runs the agent's gRPC server: AgentService, grpc.health.v1, optional
reflection, and the Prometheus endpoint; with a token and/or TLS when asked (security.py)."""

from __future__ import annotations

import platform
from concurrent import futures
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime import __version__
from fwbench.runtime.handlers import add_agent_service
from fwbench.runtime.metrics import AgentMetrics
from fwbench.runtime.orphan import LastCall
from fwbench.runtime.plugin import FrameworkPlugin
from fwbench.runtime.security import ServerSecurity
from fwbench.runtime.service import AgentServicer
from fwbench.runtime.world import World
from fwbench.spec import load_catalogue

SERVICE_NAME = agent_pb2.DESCRIPTOR.services_by_name["AgentService"].full_name
# Raw samples of a long run can exceed gRPC's 4 MiB default message size.
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


@dataclass
class AgentServer:
    server: grpc.Server
    port: int
    metrics_port: int
    servicer: AgentServicer
    health: health.HealthServicer
    last_call: LastCall  # when any call last arrived (orphan.py)

    def stop(self, grace_seconds: float = 2.0) -> None:
        """Marks the agent NOT_SERVING, cancels a running workload, then stops the server."""
        self.health.enter_graceful_shutdown()
        self.servicer.shutdown()
        self.server.stop(grace_seconds).wait()


def create_server(
    plugin: FrameworkPlugin,
    *,
    name: str,
    variant: str,
    host: str = "127.0.0.1",
    port: int = 0,
    metrics_host: str | None = None,
    metrics_port: int | None = 0,
    reflection_enabled: bool = True,
    security: ServerSecurity | None = None,
    world: World | None = None,
) -> AgentServer:
    """Starts serving and returns the server with its bound ports (port 0 picks a free one).

    metrics_port None disables the Prometheus endpoint; `security` (default: none) adds a
    token check and TLS. Raises RuntimeError when the port cannot be bound (with TLS: also
    when gRPC refuses the certificate and key)."""
    security = security or ServerSecurity()
    description = plugin.describe()
    identity = agent_pb2.AgentIdentity(
        name=name,
        framework=description.framework,
        framework_version=description.framework_version,
        variant=variant,
        plugin_version=description.plugin_version,
        runtime_version=__version__,
        python_version=platform.python_version(),
        family=description.family,
        family_version=description.family_version,
    )
    metrics = AgentMetrics(
        {
            "agent_name": name,
            "framework": identity.framework,
            "framework_version": identity.framework_version,
            "variant": variant,
        }
    )
    servicer = AgentServicer(plugin, load_catalogue(), identity, metrics, world)
    last_call = LastCall()
    servicer.trust_every_caller = security.trusts_every_caller
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="fwbench-grpc"),
        options=[
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 0),
        ],
        interceptors=[last_call, *security.interceptors()],
    )
    add_agent_service(servicer, server)  # bytes that are not a request: INVALID_ARGUMENT
    health_servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if reflection_enabled:
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
    address = f"{_bracket(host)}:{port}"
    try:
        if security.tls:
            bound = server.add_secure_port(address, security.credentials())
        else:
            bound = server.add_insecure_port(address)
    except RuntimeError:  # grpc raises for a certificate it cannot use, too
        bound = 0
    if bound == 0 and security.tls:
        raise RuntimeError(
            f"cannot serve TLS on {host}:{port}: the port is taken, or gRPC refused the "
            "certificate and key (is the key the certificate's?)"
        )
    if bound == 0:
        raise RuntimeError(f"cannot bind gRPC port {host}:{port}")
    if metrics_port is not None:
        servicer.metrics_port = metrics.serve(metrics_host or host, metrics_port)
    server.start()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return AgentServer(server, bound, servicer.metrics_port, servicer, health_servicer, last_call)


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
