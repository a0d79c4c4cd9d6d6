"""Which collector process measures a run, and whether it is still there. A collector killed
(SIGKILL, out of memory, the machine restarted) cannot mark its run finished, so the run stays
`running` in the store; with its owner recorded (host, pid and the process's start time, so a
reused pid does not count), such a run is recognised as interrupted and can be resumed
(`collector run --resume RUN_ID`)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any

import psutil


class ResumeRefused(ValueError):
    """The run cannot be resumed (unknown, or still measured by a live collector)."""


def this_collector() -> dict[str, Any]:
    """The owner record of a run measured by this process."""
    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "process_started": psutil.Process().create_time(),
    }


def collector_gone(owner: Mapping[str, Any] | None) -> bool:
    """Whether the collector that owns a `running` run is gone. Runs stored before owners were
    recorded count as gone (their collectors are older than this one). A collector on another
    host cannot be checked from here: it counts as alive, so its run is never taken over."""
    if not owner:
        return True
    if owner.get("hostname") != socket.gethostname():
        return False
    try:
        process = psutil.Process(int(owner["pid"]))
        return abs(process.create_time() - float(owner["process_started"])) > 1.0
    except (psutil.NoSuchProcess, KeyError, ValueError, TypeError):
        return True
    except psutil.AccessDenied:
        return False


def owner_text(metadata: Mapping[str, Any]) -> str:
    """Says who still measures a `running` run, for a refusal."""
    owner = metadata.get("collector") or {}
    return (
        f"still being measured by collector pid {owner.get('pid')} on {owner.get('hostname')}; "
        "wait for it, or stop it (Ctrl-C keeps what it measured) and resume then"
    )
