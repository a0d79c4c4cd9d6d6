"""No container of a run outlives it: every container carries the run's id, this host and this
collector's pid as labels; the end of a run removes its containers and refuses new ones, and
the next run sweeps what a collector killed outright (SIGKILL) left behind."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable
from typing import Any

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.docker_engine import docker_client, docker_errors
from fwbench.collector.launchers.base import process_exists

RUN_LABEL = "fwbench.run_id"
HOST_LABEL = "fwbench.collector-host"
PID_LABEL = "fwbench.collector-pid"


def remove_run_containers(run_id: str) -> int:
    """Removes every container of this run, running or not, and refuses new ones from then on
    (a start still under way in another thread when the run ends); returns how many. Then its
    networks (a world's: launchers/world.py)."""
    with _closed_lock:
        _closed_runs.add(run_id)
    removed = _remove({"label": f"{RUN_LABEL}={run_id}"})
    _remove_networks({"label": f"{RUN_LABEL}={run_id}"})
    return removed


def run_labels(run_id: str) -> dict[str, str]:
    """What every container and network of a run carries, for the sweeps below."""
    return {RUN_LABEL: run_id, HOST_LABEL: socket.gethostname(), PID_LABEL: str(os.getpid())}


def create_network(client: Any, run_id: str, name: str) -> Callable[[], None]:
    """A user-defined bridge network (containers on it reach each other by container name);
    returns what removes it."""
    try:
        network = client.networks.create(name, driver="bridge", labels=run_labels(run_id))
    except docker_errors().APIError as error:
        raise AgentUnavailable(f"docker refused network {name}: {error}") from None

    def remove() -> None:
        with contextlib.suppress(docker_errors().NotFound, docker_errors().APIError):
            network.remove()

    return remove


def _remove_networks(
    filters: dict[str, str | list[str] | bool], chosen: Callable[[Any], bool] = lambda _: True
) -> None:
    try:
        client = docker_client()
    except Exception:  # noqa: BLE001 (no daemon: nothing of ours exists)
        return
    for network in [n for n in client.networks.list(filters=filters) if chosen(n)]:
        with contextlib.suppress(docker_errors().NotFound, docker_errors().APIError):
            network.remove()


_closed_runs: set[str] = set()
_closed_lock = threading.Lock()


def refuse_if_closed(run_id: str, name: str) -> None:
    with _closed_lock:
        if run_id in _closed_runs:
            raise AgentUnavailable(f"agent {name} not started: run {run_id} has ended")


def remove_orphans() -> int:
    """Removes containers that collectors on this host started and that outlived them."""

    def orphaned(labels: dict[str, str]) -> bool:
        pid = labels.get(PID_LABEL, "")
        return pid.isdigit() and not process_exists(int(pid))

    host: dict[str, str | list[str] | bool] = {"label": f"{HOST_LABEL}={socket.gethostname()}"}
    removed = _remove(host, lambda container: orphaned(container.labels))
    _remove_networks(host, lambda network: orphaned(network.attrs.get("Labels") or {}))
    return removed


def _remove(
    filters: dict[str, str | list[str] | bool], chosen: Callable[[Any], bool] = lambda _: True
) -> int:
    try:
        client = docker_client()
    except Exception:  # noqa: BLE001 (no daemon: nothing of ours can be running)
        return 0
    found = [
        c
        for c in client.containers.list(all=True, ignore_removed=True, filters=filters)
        if chosen(c)
    ]
    for container in found:
        with contextlib.suppress(docker_errors().NotFound, docker_errors().APIError):
            container.remove(force=True)
    return len(found)
