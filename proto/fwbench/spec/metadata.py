"""What travels beside the messages, as gRPC metadata (agent.proto's header says the same),
and the one way both sides read a token (docs/security.md):

- `authorization: Bearer TOKEN` on every call, when the agent was started with a token;
- `x-fwbench-client: ID`, a random id per client (a collector's AgentClient), naming the
  caller whose run a Cancel with an empty run id may stop.

A token comes from a file (so it is on no command line: $FWBENCH_AGENT_TOKEN_FILE) or, for
containers, from $FWBENCH_AGENT_TOKEN; surrounding whitespace (a file's newline) is dropped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

AUTHORIZATION = "authorization"
BEARER = "Bearer "
CLIENT_ID = "x-fwbench-client"
TOKEN_FILE_VARIABLE = "FWBENCH_AGENT_TOKEN_FILE"
TOKEN_VARIABLE = "FWBENCH_AGENT_TOKEN"


class TokenError(ValueError):
    """A token file that cannot be read, or a token that cannot travel as metadata."""


def read_token(path: Path | None, environ: Mapping[str, str]) -> str:
    """The token in `path`, else in the file $FWBENCH_AGENT_TOKEN_FILE names, else
    $FWBENCH_AGENT_TOKEN; "" when none is set (an empty variable counts as unset, an empty
    file does not). Raises TokenError."""
    if path is None and environ.get(TOKEN_FILE_VARIABLE):
        path = Path(environ[TOKEN_FILE_VARIABLE])
    if path is None:
        token, origin = environ.get(TOKEN_VARIABLE, "").strip(), f"${TOKEN_VARIABLE}"
        if not token:
            return ""
    else:
        try:
            token = path.read_bytes().decode(errors="replace").strip()
        except OSError as error:
            raise TokenError(f"cannot read token file {path}: {error.strerror}") from None
        origin = f"token file {path}"
        if not token:
            raise TokenError(f"{origin} is empty")
    if not token.isascii() or not token.isprintable() or " " in token:
        raise TokenError(f"{origin}: a token is printable ASCII without spaces")
    return token
