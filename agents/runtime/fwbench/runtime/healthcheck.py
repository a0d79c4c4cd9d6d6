"""`python -m fwbench.runtime.healthcheck`: asks an agent's grpc.health.v1 service whether it
is SERVING; exit status 0 when it is, 1 otherwise (what Docker's HEALTHCHECK and compose's
`healthcheck` expect). Framework-free and quick: it imports no plugin.

The address defaults to the agent this container runs: 127.0.0.1 and $FWBENCH_GRPC_PORT
(50051 when unset). The health service needs no token (docs/security.md); an agent serving
TLS is reached with TLS when $FWBENCH_TLS_CA or $FWBENCH_TLS_CERT is set (security.client_tls:
in a container whose agent serves TLS, set $FWBENCH_TLS_CA to the CA that signed its
certificate; with mutual TLS, its own certificate must also be one that the client CA
accepts)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from fwbench.runtime.security import SecurityConfigError, client_tls
from fwbench.spec import startup


def check(
    address: str,
    timeout_seconds: float,
    service: str = "",
    credentials: grpc.ChannelCredentials | None = None,
    options: Sequence[tuple[str, Any]] = (),
) -> str:
    """The health status name (SERVING, NOT_SERVING, ...) or why there is none. Blocks at
    most `timeout_seconds`; never raises for an unreachable agent. `credentials`: TLS."""
    channel = (
        grpc.secure_channel(address, credentials, options=list(options))
        if credentials
        else grpc.insecure_channel(address)
    )
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            reply = stub.Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout_seconds
            )
        except grpc.RpcError as error:
            return f"unreachable ({error.code().name})"
    return str(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))


def main(argv: list[str] | None = None) -> int:
    port = os.environ.get(startup.GRPC_PORT, "50051")
    parser = argparse.ArgumentParser(prog="fwbench-healthcheck", description=__doc__)
    parser.add_argument("--address", default=f"127.0.0.1:{port}", help="agent HOST:PORT")
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait")
    parser.add_argument("--service", default="", help="service name ('' = the whole server)")
    args = parser.parse_args(argv)
    try:
        credentials, options = client_tls(os.environ)
    except SecurityConfigError as error:
        print(f"{args.address}: {error}")
        return 1
    status = check(args.address, args.timeout, args.service, credentials, options)
    print(f"{args.address}: {status}")
    return 0 if status == "SERVING" else 1


if __name__ == "__main__":
    sys.exit(main())
