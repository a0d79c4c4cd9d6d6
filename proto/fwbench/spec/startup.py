"""How an agent is started: the environment variables it reads at start, the command line that
starts it, and the ports file it writes once it listens. The collector's launchers (a process,
a container, a Slurm job, a Kubernetes pod) and the agent runtime both import this module, so
no launcher spells a variable's name and the command line is built in one place.

Variables, each with who sets it (docs/plugins.md lists what a plugin may read):"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Identity and address: a container's image sets these (images/dockerfile.py) so its command
# needs no arguments; flags of the agent's command line override them.
PLUGIN = "FWBENCH_PLUGIN"
AGENT_NAME = "FWBENCH_AGENT_NAME"
VARIANT = "FWBENCH_VARIANT"
HOST = "FWBENCH_HOST"  # the address to bind (default 127.0.0.1)
GRPC_PORT = "FWBENCH_GRPC_PORT"
METRICS_PORT = "FWBENCH_METRICS_PORT"
# Seconds without a call (and no run) after which an agent ends itself: its collector is gone.
ORPHAN_SECONDS = "FWBENCH_ORPHAN_SECONDS"
# What the collector asked for (--threads; a world: each rank's share of the host).
THREADS = "FWBENCH_THREADS"
# Worlds (docs/distributed.md), besides torchrun's WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR,
# MASTER_PORT: the CPUs a rank pins itself to ("0,1"), every rank's HOST:PORT in rank order
# (TensorFlow's TF_CONFIG), the devices of a process of several (NAME~w1xD), the collective
# backend ("" = the framework's default) and the rendezvous's timeout.
CPUS = "FWBENCH_CPUS"
PEERS = "FWBENCH_PEERS"
LOCAL_DEVICES = "FWBENCH_LOCAL_DEVICES"
DIST_BACKEND = "FWBENCH_DIST_BACKEND"
DIST_TIMEOUT_SECONDS = "FWBENCH_DIST_TIMEOUT_SECONDS"
# Variables besides the framework's own that the agent reports in Describe (comma-separated).
REPORT_VARIABLES = "FWBENCH_REPORT_VARIABLES"
# TLS (docs/security.md): the server's pair and the CA whose clients it requires; a client's
# CA to trust and the name to check (the collector, the container's health check).
TLS_CERT = "FWBENCH_TLS_CERT"
TLS_KEY = "FWBENCH_TLS_KEY"
TLS_CLIENT_CA = "FWBENCH_TLS_CLIENT_CA"
TLS_CA = "FWBENCH_TLS_CA"
TLS_SERVER_NAME = "FWBENCH_TLS_SERVER_NAME"
# The run's token: metadata.py (TOKEN_FILE_VARIABLE, TOKEN_VARIABLE).

DEFAULT_HOST = "127.0.0.1"
ANY_HOST = "0.0.0.0"  # a container's, a node's, a pod's: the collector is elsewhere


@dataclass(frozen=True)
class AgentCommand:
    """The agent's command line (fwbench-agent's, run as `python -P -m fwbench.runtime.cli`
    so that the working folder never shadows a module)."""

    python: Path
    plugin: str
    name: str
    variant: str
    host: str = DEFAULT_HOST
    port: int = 0  # 0: any free port, said in the ports file
    metrics_port: int | None = 0  # None: no /metrics
    ports_file: Path | None = None
    orphan_seconds: float = 0.0
    token_file: Path | None = None
    tls_cert: Path | None = None  # with tls_key: serve TLS with this pair
    tls_key: Path | None = None
    exit_with_parent: int = 0  # the collector's pid: end with it (a local process)

    def argv(self) -> list[str]:
        argv = [
            str(self.python),
            "-P",
            "-m",
            "fwbench.runtime.cli",
            "--plugin",
            self.plugin,
            "--name",
            self.name,
            "--variant",
            self.variant,
            "--host",
            self.host,
            "--port",
            str(self.port),
        ]
        if self.metrics_port is None:
            argv += ["--no-metrics"]
        else:
            argv += ["--metrics-port", str(self.metrics_port)]
        if self.ports_file is not None:
            argv += ["--ports-file", str(self.ports_file)]
        if self.orphan_seconds:
            argv += ["--orphan-seconds", f"{self.orphan_seconds:g}"]
        if self.token_file is not None:
            argv += ["--token-file", str(self.token_file)]
        if self.tls_cert is not None and self.tls_key is not None:
            argv += ["--tls-cert", str(self.tls_cert), "--tls-key", str(self.tls_key)]
        if self.exit_with_parent:
            argv += ["--exit-with-parent", str(self.exit_with_parent)]
        return argv


def write_ports(path: Path, grpc: int, metrics: int | None) -> None:
    """The ports file, written once the agent listens: {"grpc": P, "metrics": M, "pid": PID,
    "host": H} (H: this host's name, by which a collector elsewhere reaches a Slurm rank).
    Written whole under another name first, so a reader never sees half of it."""
    found = {"grpc": grpc, "metrics": metrics, "pid": os.getpid(), "host": socket.gethostname()}
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(found))
    partial.replace(path)


def read_ports(path: Path) -> dict[str, Any]:
    """The ports file as write_ports wrote it; ValueError when it is not that."""
    found = json.loads(path.read_text())
    if not isinstance(found, dict) or not isinstance(found.get("grpc"), int):
        raise ValueError(f"{path}: not an agent's ports file: {found!r}")
    return found


def thread_variables(threads: int) -> Mapping[str, str]:
    """What a launcher exports for --threads (nothing for the agent's default, 0)."""
    return {THREADS: str(threads)} if threads else {}
