"""Commands a test interrupts with SIGINT, as from a user's terminal.

A background shell (`make test &`, nohup) hands its children SIGINT ignored, and Python then
never raises KeyboardInterrupt; a terminal gives the default action. The child must start with
the default, but not through Popen's preexec_fn: that makes Python fork instead of spawning,
and a forked child of a process that has used gRPC (a pytest worker that served or called an
agent) runs gRPC's fork handlers, whose poller thread can abort the child before it execs
("epoll_wait error: Bad file descriptor", exit -6: grpc/grpc#43055, seen in `make test` on
2026-12-07). So a launcher restores the default and execs the command: same process, no fork
handlers."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from os import PathLike

LAUNCH = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def with_sigint(command: Sequence[str | PathLike[str]]) -> list[str]:
    """`command`, started with SIGINT's default action (its process is the command's)."""
    return [sys.executable, "-c", LAUNCH, *map(str, command)]
