"""The options with which `collector run` and `collector describe` reach an agent someone else
runs (NAME@HOST:PORT) with a token and/or TLS (agents/security.py, docs/security.md). Each
falls back to its environment variable; agents the collector starts itself use none of them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fwbench.collector.cli.common import fail_with
from fwbench.spec import startup

if TYPE_CHECKING:
    from fwbench.collector.agents.security import ChannelSecurity

AgentTokenFile = Annotated[
    Path | None,
    typer.Option(
        "--agent-token-file",
        help="File holding the token attached agents demand (sent as 'authorization: Bearer "
        "TOKEN'; default: $FWBENCH_AGENT_TOKEN_FILE, else the token in $FWBENCH_AGENT_TOKEN).",
    ),
]
TlsCa = Annotated[
    Path | None,
    typer.Option(
        "--tls-ca",
        help="PEM CA certificate that signed attached agents' certificates: reach them over "
        f"TLS (default: ${startup.TLS_CA}; the name checked: ${startup.TLS_SERVER_NAME}, else "
        "the address's host).",
    ),
]
TlsCert = Annotated[
    Path | None,
    typer.Option(
        "--tls-cert",
        help="PEM client certificate for attached agents that demand one (mutual TLS; "
        f"default: ${startup.TLS_CERT}).",
    ),
]
TlsKey = Annotated[
    Path | None,
    typer.Option("--tls-key", help=f"PEM private key of --tls-cert (default: ${startup.TLS_KEY})."),
]


# The parameter names of the options above, as commands declare them.
SECURITY_OPTIONS = ("agent_token_file", "tls_ca", "tls_cert", "tls_key")


def security_settings(
    token_file: Path | None, ca: Path | None, cert: Path | None, key: Path | None
) -> ChannelSecurity:
    """The settings, or exit 2 with one line for a file that cannot be read or used."""
    from fwbench.collector.agents.security import SecurityError, channel_security

    try:
        return channel_security(token_file, ca, cert, key)
    except SecurityError as error:
        fail_with(error)
