"""Who may use an agent: an optional bearer token, TLS with an optional client-certificate
check (mutual TLS), and who may cancel a run (docs/security.md).

- Token: every AgentService call must carry the metadata `authorization: Bearer TOKEN`,
  compared in constant time; anything else is refused with UNAUTHENTICATED before the request
  is even parsed. The health service (a liveness probe: Docker's HEALTHCHECK, compose,
  Kubernetes) and server reflection (the public schema) stay open: they reveal nothing a
  caller could misuse and change nothing.
- TLS: the server's certificate and key; with a client CA, every connection must present a
  certificate that CA signed (mTLS), for every service, health included.
- Callers: a collector names itself with the metadata `x-fwbench-client` (a random id per
  client); without it the caller is its connection's peer address. Cancel with an empty run
  id stops only the caller's own run, unless every caller is trusted (a token or mTLS
  authenticates them all)."""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from fwbench.spec import startup
from fwbench.spec.metadata import AUTHORIZATION, BEARER, CLIENT_ID

# Services every caller may use without a token: readiness probes and the public schema.
OPEN_SERVICES = (
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
)


class SecurityConfigError(ValueError):
    """A token or certificate file that cannot be read or used (one line, for exit 2)."""


@dataclass(frozen=True)
class ServerSecurity:
    """What an agent demands of its callers; the default demands nothing."""

    token: str = ""
    cert: bytes = b""  # PEM certificate chain of the server ("" = no TLS)
    key: bytes = b""
    client_ca: bytes = b""  # PEM CA that signs accepted client certificates ("" = no mTLS)

    @property
    def tls(self) -> bool:
        return bool(self.cert)

    @property
    def trusts_every_caller(self) -> bool:
        """Whether every caller that gets through is authenticated (token or mTLS), so any of
        them may cancel the active run without naming it."""
        return bool(self.token or self.client_ca)

    def summary(self) -> str:
        """What callers must bring, for the agent's start-up line."""
        tls = "mutual TLS" if self.client_ca else "TLS" if self.tls else ""
        return (
            " and ".join(w for w in ("token" if self.token else "", tls) if w) or "no token, no TLS"
        )

    def credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials(
            [(self.key, self.cert)],
            root_certificates=self.client_ca or None,
            require_client_auth=bool(self.client_ca),
        )

    def interceptors(self) -> list[grpc.ServerInterceptor]:
        return [TokenCheck(self.token)] if self.token else []


def read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise SecurityConfigError(f"cannot read {what} {path}: {error.strerror}") from None


def read_pem(path: Path, what: str, marker: str) -> bytes:
    """The file's bytes, when they hold a PEM block whose label ends with `marker`."""
    data = read_file(path, what)
    if f"{marker}-----".encode() not in data or b"-----BEGIN " not in data:
        raise SecurityConfigError(f"{what} {path} is not a PEM {marker.lower()}")
    return data


def server_security(
    token: str, cert: Path | None, key: Path | None, client_ca: Path | None
) -> ServerSecurity:
    """Reads the TLS files; raises SecurityConfigError for a missing pair or a bad file."""
    if bool(cert) != bool(key):
        raise SecurityConfigError("--tls-cert and --tls-key go together (the server's own pair)")
    if client_ca and not cert:
        raise SecurityConfigError("--tls-client-ca needs --tls-cert and --tls-key (mutual TLS)")
    if cert is None or key is None:
        return ServerSecurity(token=token)
    return ServerSecurity(
        token=token,
        cert=read_pem(cert, "--tls-cert", "CERTIFICATE"),
        key=read_pem(key, "--tls-key", "PRIVATE KEY"),
        client_ca=read_pem(client_ca, "--tls-client-ca", "CERTIFICATE") if client_ca else b"",
    )


def is_loopback(host: str) -> bool:
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def caller(context: grpc.ServicerContext) -> str:
    """The caller: the id it sends as `x-fwbench-client`, else its peer address."""
    for key, value in context.invocation_metadata() or ():
        if key == CLIENT_ID and value:
            return f"client {value!s}"
    return f"peer {context.peer()}"


if TYPE_CHECKING:
    Handler = grpc.RpcMethodHandler[Any, Any]  # generic in the stubs only


class TokenCheck(grpc.ServerInterceptor):
    """Refuses every call outside OPEN_SERVICES that lacks `authorization: Bearer TOKEN`."""

    def __init__(self, token: str) -> None:
        self._expected = f"{BEARER}{token}".encode()

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Handler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler | None:
        method: str = handler_call_details.method
        if method.startswith(OPEN_SERVICES):
            return continuation(handler_call_details)
        metadata = handler_call_details.invocation_metadata
        given = next((str(v) for k, v in metadata or () if k == AUTHORIZATION), "")
        if hmac.compare_digest(given.encode(), self._expected):
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None  # unknown method: UNIMPLEMENTED, as without a token
        why = "a token is required" if not given else "the token is wrong"
        return _refusal(handler, f"{why}: send the metadata 'authorization: Bearer TOKEN'")


def _refusal(handler: Handler, message: str) -> Handler:
    """A handler of the same shape as `handler` that refuses with UNAUTHENTICATED (the request
    stays unparsed: no deserializer)."""

    def refuse(request: Any, context: grpc.ServicerContext) -> Any:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(refuse)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(refuse)
    return grpc.unary_unary_rpc_method_handler(refuse)


def client_tls(environ: Mapping[str, str]) -> tuple[grpc.ChannelCredentials | None, list[Any]]:
    """Channel credentials and options of a client of an agent (the healthcheck), from the
    variables a collector reads too: $FWBENCH_TLS_CA (the CA to trust), $FWBENCH_TLS_CERT and
    $FWBENCH_TLS_KEY (the pair to present: in an agent's container, its own) and
    $FWBENCH_TLS_SERVER_NAME (the name to check instead of the address's host). None:
    plaintext, when neither a CA nor a certificate is set. Raises SecurityConfigError."""
    ca, cert, key = (
        environ.get(name) for name in (startup.TLS_CA, startup.TLS_CERT, startup.TLS_KEY)
    )
    if not (ca or cert):
        return None, []
    credentials = grpc.ssl_channel_credentials(
        read_pem(Path(ca), f"${startup.TLS_CA}", "CERTIFICATE") if ca else None,
        read_pem(Path(key), f"${startup.TLS_KEY}", "PRIVATE KEY") if cert and key else None,
        read_pem(Path(cert), f"${startup.TLS_CERT}", "CERTIFICATE") if cert and key else None,
    )
    name = environ.get(startup.TLS_SERVER_NAME)
    return credentials, [("grpc.ssl_target_name_override", name)] if name else []
