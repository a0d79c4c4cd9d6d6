"""How the collector reaches an agent someone else runs (NAME@HOST:PORT): with a bearer token
and/or TLS, presenting a client certificate where the agent demands one (mutual TLS); see
docs/security.md. Settings come from explicit values (the commands' options) or else from the
environment: $FWBENCH_AGENT_TOKEN_FILE or $FWBENCH_AGENT_TOKEN, $FWBENCH_TLS_CA (the CA to
trust), $FWBENCH_TLS_CERT and $FWBENCH_TLS_KEY (the client pair), $FWBENCH_TLS_SERVER_NAME
(the name the agent's certificate must carry, when not the address's host).

Agents the collector starts itself listen on loopback and need none of it: they are started
without AGENT_VARIABLES, so that a collector's settings never make its own agents demand a
token or TLS that it does not send them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from fwbench.spec import startup
from fwbench.spec.metadata import (
    AUTHORIZATION,
    BEARER,
    TOKEN_FILE_VARIABLE,
    TOKEN_VARIABLE,
    TokenError,
    read_token,
)

# What an agent reads to demand a token or serve TLS (fwbench-agent's options).
AGENT_VARIABLES = (
    TOKEN_FILE_VARIABLE,
    TOKEN_VARIABLE,
    startup.TLS_CERT,
    startup.TLS_KEY,
    startup.TLS_CLIENT_CA,
)
# Failures of a TLS handshake that no retry mends: fail at once instead of waiting.
_TLS_REFUSALS = ("CERTIFICATE_VERIFY_FAILED", "Hostname Verification", "WRONG_VERSION_NUMBER")


class SecurityError(ValueError):
    """A token or certificate file that cannot be read or used."""


@dataclass(frozen=True)
class ChannelSecurity:
    """What a channel to one agent carries; the default is plaintext without a token."""

    token: str = ""
    ca: bytes | None = None  # PEM roots to trust; None = the system's (when TLS is on)
    cert: bytes | None = None  # PEM client certificate chain, for mutual TLS
    key: bytes | None = None
    server_name: str = ""

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.cert is not None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((AUTHORIZATION, f"{BEARER}{self.token}"),) if self.token else ()

    def credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(self.ca, self.key, self.cert)

    def options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []

    def refused(self, details: str) -> bool:
        """Whether a failed connection is a TLS refusal that waiting cannot mend."""
        return any(marker in details for marker in _TLS_REFUSALS)

    def hint(self, details: str) -> str:
        """What to check, for a connection the agent closed at once."""
        if "Socket closed" not in details:
            return ""
        if not self.tls:
            return "; an agent serving TLS closes plaintext connections: give --tls-ca"
        if self.cert is None:
            return (
                "; an agent demanding client certificates (mutual TLS) closes connections "
                "without one: give --tls-cert and --tls-key"
            )
        return "; the agent may not accept this client certificate (--tls-cert)"


def _pem(path: Path, what: str, marker: str) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as error:
        raise SecurityError(f"cannot read {what} {path}: {error.strerror}") from None
    if f"{marker}-----".encode() not in data or b"-----BEGIN " not in data:
        raise SecurityError(f"{what} {path} is not a PEM {marker.lower()}")
    return data


def channel_security(
    token_file: Path | None = None,
    ca: Path | None = None,
    cert: Path | None = None,
    key: Path | None = None,
    server_name: str = "",
    environ: Mapping[str, str] | None = None,
) -> ChannelSecurity:
    """The settings: each explicit value, else its environment variable. Raises
    SecurityError for a file that cannot be read or is not PEM, or a certificate without its
    key."""
    env = os.environ if environ is None else environ

    def given(value: Path | None, variable: str) -> Path | None:
        return value or (Path(env[variable]) if env.get(variable) else None)

    ca, cert, key = (
        given(ca, startup.TLS_CA),
        given(cert, startup.TLS_CERT),
        given(key, startup.TLS_KEY),
    )
    if bool(cert) != bool(key):
        raise SecurityError("a client certificate needs its key: give --tls-cert and --tls-key")
    try:
        token = read_token(token_file, env)
    except TokenError as error:
        raise SecurityError(str(error)) from None
    return ChannelSecurity(
        token=token,
        ca=_pem(ca, "--tls-ca", "CERTIFICATE") if ca else None,
        cert=_pem(cert, "--tls-cert", "CERTIFICATE") if cert else None,
        key=_pem(key, "--tls-key", "PRIVATE KEY") if key else None,
        server_name=server_name or env.get(startup.TLS_SERVER_NAME, ""),
    )
