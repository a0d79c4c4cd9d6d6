"""What a run records of itself in run.json and the store: its id, the host, each agent."""

from __future__ import annotations

import datetime as dt
import os
import platform
import secrets
import socket
from typing import Any

from google.protobuf.json_format import MessageToDict

from fwbench.agent.v1 import agent_pb2
from fwbench.collector import __version__
from fwbench.collector.launchers import AgentHandle
from fwbench.spec import SPEC_VERSION


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


def host_metadata() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "collector_version": __version__,
        "spec_version": SPEC_VERSION,
    }


def agent_metadata(handle: AgentHandle, describe: agent_pb2.DescribeResponse) -> dict[str, Any]:
    return {
        **handle.metadata(),
        "describe": MessageToDict(describe, preserving_proto_field_name=True),
    }


def shared_nodes(handles: list[AgentHandle]) -> dict[str, list[str]]:
    """Scheduler nodes that held more than one of the run's agents (a world's ranks count as
    their world), with those agents: they never measured at the same time (the collector runs
    one cell at a time), but they shared the node's memory and caches while idle."""
    on: dict[str, set[str]] = {}
    for handle in handles:
        for one in getattr(handle, "ranks", None) or [handle]:
            if node := str(one.identity().get("node") or ""):
                on.setdefault(node, set()).add(handle.name)
    return {node: sorted(names) for node, names in sorted(on.items()) if len(names) > 1}
