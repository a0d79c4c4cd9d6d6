"""What every launcher gives the rest of the collector: an AgentHandle (a reachable agent, one
subclass per launcher kind) and the Launcher interface that starts agents from manifests.

A launcher is one module in this package: a Launcher implementation with its handle type,
registered by kind in `launchers/__init__.py`. Readiness is the same for all: the agent's
gRPC health service answers SERVING."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.docker_engine import ImageInfo
from fwbench.collector.agents.launcher_kinds import DEFAULT_PIDS_LIMIT as DEFAULT_PIDS_LIMIT
from fwbench.collector.agents.launcher_kinds import LauncherKind as LauncherKind
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.options import LauncherOptions
from fwbench.spec import startup

START_TIMEOUT_SECONDS = 180.0
DEFAULT_MEMORY_SHARE = 0.9  # of the host's memory, so a runaway agent cannot take it all


@dataclass
class AgentHandle:
    """A reachable agent. This base is an agent someone else runs (attached, NAME@HOST:PORT):
    nothing to start or stop but the channel. Subclasses own a process or a container."""

    kind: ClassVar[str] = "attached"
    # Whether the agent reads this host's files at their paths (a model file): an attached
    # agent may run anywhere, so it is sent them (run/model_upload.py).
    sees_files: ClassVar[bool] = False

    instance: Instance  # which agent, in what world shape, which copy and rank
    address: str
    client: AgentClient
    manifest: AgentManifest | None = None
    threads: int = 0  # FWBENCH_THREADS it was started with; 0 = framework default
    # host:port of the agent's Prometheus /metrics as the collector reaches it ("" = none).
    metrics_address: str = ""
    log_path: Path | None = None
    # The agent's process id as this host sees it (a container's main process); 0 = unknown
    # (attached: the collector only has the agent's own word, Describe's pid).
    host_pid: int = 0
    details: dict[str, Any] = field(default_factory=dict)  # extra run.json facts

    @property
    def name(self) -> str:
        """The instance's name, as the results table's `agent` column says it."""
        return str(self.instance)

    def alive(self) -> bool:
        """Whether the agent still exists (a process or container), or answers (attached)."""
        return self.client.healthy()

    def exit_reason(self) -> str:
        """Why the agent is gone, with the tail of its log when there is one."""
        return f"agent at {self.address} stopped answering"

    def settle(self, seconds: float) -> None:
        """Gives a dying agent up to `seconds` to be reaped, so exit_reason() can tell why."""

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Stops what the launcher started (SIGTERM, SIGKILL after the grace period) and closes
        the channel. Idempotent."""
        self.client.close()

    def identity(self) -> dict[str, Any]:
        """Launcher-specific columns of every row this agent measures (results schema)."""
        return {
            "image": "",
            "image_id": "",
            "image_digest": "",
            "environment_source": self.kind,  # attached; local and docker say theirs
            "agent_python": "",
        }

    def metadata(self) -> dict[str, Any]:
        """What run.json records of how this agent ran."""
        manifest = self.manifest
        return {
            "launcher": self.kind,
            "address": self.address,
            "image": None,
            "manifest": str(manifest.path) if manifest and not manifest.image else None,
            "declared_by": manifest.source if manifest else None,
            "environment_path": None,
            **self.details,
        }

    # Lines a launcher's own tools write into the agent's log (srun's), never the agent's why.
    LOG_NOISE: ClassVar[tuple[str, ...]] = ()

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return log_tail(self.log_path.read_text(errors="replace"), self.LOG_NOISE)


# The last line of a Python traceback: the exception's (qualified) type, a colon, its message.
_RAISED = re.compile(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b:")
TAIL_LINES = 40  # how far back a log is read for the error that ended it


def log_tail(text: str, noise: tuple[str, ...] = ()) -> str:
    """ "; last log line: ...", or "" for an empty log; preceded by "; last error in the log:
    ..." when a Python traceback in the last TAIL_LINES lines named an exception that is not
    that last line: a world's ranks share one log, where a live rank's line can follow the
    failed rank's error. Lines that start with `noise` are skipped (a scheduler's, written
    after the agent died: srun's "task 0: Exited with exit code 1")."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith(noise)]
    if not lines:
        return ""
    last = f"; last log line: {lines[-1][:300]}"
    raised = [line for line in lines[-TAIL_LINES:] if _RAISED.match(line)]
    if raised and raised[-1] != lines[-1]:
        return f"; last error in the log: {raised[-1][:300]}{last}"
    return last


@dataclass
class Placement:
    """Where a world's ranks meet (launchers/world.py): rank 0's rendezvous, every rank's own
    address (FWBENCH_PEERS), what the row calls it, and what to undo when the world ends."""

    address: str  # MASTER_ADDR, as every rank reaches it
    port: int  # MASTER_PORT
    peers: list[str]  # HOST:PORT of each rank, in rank order
    kind: str  # world_placement: "local" (processes here), "docker-network", ...
    release: Callable[[], None] = field(default=lambda: None)
    # Whether the collector pins each rank to CPUs of its own host (FWBENCH_CPUS); a scheduler
    # binds the ranks it places itself.
    pins_cpus: bool = True


class Launcher(Protocol):
    """Starts agents from their manifests, one kind of place each (process, container, ...)."""

    kind: LauncherKind
    options: ClassVar[type[LauncherOptions]]  # its own options (launchers/options.py)
    # Whether an agent it started holds a scheduler's allocation while idle (Slurm's job, a
    # pod's requests): the run then starts its agents one at a time and gives each one's
    # allocation back until its cells come (run/session.py), so a small cluster is never
    # held by agents that wait, and worlds that cannot fit together run one after another.
    holds_allocation: bool

    def __init__(self, settings: LaunchSettings) -> None: ...

    def start(
        self,
        manifest: AgentManifest,
        instance: Instance,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
        abandon: threading.Event | None = None,
    ) -> AgentHandle:
        """Starts `instance` (the agent, a further A/A copy NAME#2, a world's rank) and blocks
        until it is healthy or `start_timeout_seconds` pass. `threads` > 0 sets FWBENCH_THREADS
        (frameworks that size their thread pools at start-up); `extra_environment` adds
        variables (a rank's world: launchers/world.py). Raises AgentUnavailable, or the
        launcher's own preparation errors (environment or image builds); nothing it started
        is left running when it raises. Thread-safe: agents of a run start side by side.
        `abandon`, once set, gives the start up (AgentUnavailable) instead of waiting out the
        timeout: a world whose other rank failed (its ranks wait for each other). The local
        and Docker launchers honour it; Slurm and Kubernetes start a world as one job, which
        their own checks end."""
        ...

    def close(self) -> None:
        """Removes anything of this launcher's runs that outlived their handles (a start under
        way when the run was interrupted). Idempotent; later starts are refused."""
        ...

    @staticmethod
    def sweep_orphans() -> None:
        """Removes what collectors on this host that were killed left running (Docker
        containers and networks, Slurm jobs), before a run starts."""
        ...

    def place_world(self, manifest: AgentManifest, world: Instance, threads: int) -> Placement:
        """Where the `world.ranks` ranks of `world` (NAME~wN) of `manifest`'s agent, `threads`
        each, will meet; its ranks are then started as `world.of_rank(R)` (a scheduler may have
        submitted them all at once here, as one allocation). Raises AgentUnavailable when
        they cannot be placed."""
        ...


def _ignore(_: str) -> None:
    pass


_Options = TypeVar("_Options", bound=LauncherOptions)


@dataclass(frozen=True)
class LaunchSettings:
    """What every launcher is constructed with: the run's, and its own options."""

    run_id: str
    log_dir: Path
    report: Callable[[str], None] = _ignore  # one line of progress (builds, pulls)
    start_timeout_seconds: float = START_TIMEOUT_SECONDS
    # The launcher's own options (its `options` class; None = its defaults).
    options: LauncherOptions | None = None
    # docker: the image of an agent, built or refreshed when needed (images/build.py).
    image_for: Callable[[AgentManifest], ImageInfo] | None = None
    # slurm --slurm-container, kubernetes: the name of an agent's image (images/build.py
    # image_tag), which the registry prefixes.
    image_tag: Callable[[AgentManifest], str] | None = None
    # every launcher: variables every agent gets (`--agent-env`, as agent_environment.for_agents
    # makes them), under the manifest's and over nothing the collector sets itself.
    environment: Mapping[str, str] = field(default_factory=dict)
    # docker: host paths every container sees at the same path, (path, writable): the user's
    # model file and the run's models/ folder (run/model_prepare.py; others share the host's).
    mounts: Sequence[tuple[Path, bool]] = ()

    def own(self, kind: type[_Options]) -> _Options:
        """The options, as the launcher whose they are declares them (its defaults when none
        were given)."""
        if self.options is None:
            return kind()
        if not isinstance(self.options, kind):
            raise TypeError(f"{type(self.options).__name__} given to a launcher of {kind.__name__}")
        return self.options


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` now (a rendezvous port for a world's ranks)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports free on `host` now: every probe stays bound until all are
    chosen, so the kernel cannot hand one port out twice (ports asked for one at a time can
    repeat: a world's ranks would then collide)."""
    with contextlib.ExitStack() as stack:
        probes = [stack.enter_context(socket.socket()) for _ in range(count)]
        for probe in probes:
            probe.bind((host, 0))
        return [int(probe.getsockname()[1]) for probe in probes]


# An agent a scheduler started (Slurm, Kubernetes) ends itself when no call has reached it for
# orphan_seconds() (runtime/orphan.py; FWBENCH_ORPHAN_SECONDS in the collector's environment
# changes it), while the collector calls each of its agents every keepalive_seconds() for as
# long as its run lasts: a collector killed outright leaves nothing running for longer.
ORPHAN_SECONDS = 30.0
KEEPALIVE_SECONDS = 5.0


def orphan_seconds() -> float:
    return float(os.environ.get(startup.ORPHAN_SECONDS) or ORPHAN_SECONDS)


def keepalive_seconds() -> float:
    return min(KEEPALIVE_SECONDS, orphan_seconds() / 3)


def keep_alive(handles: list[AgentHandle], stop: threading.Event, seconds: float) -> None:
    """Calls every agent in `handles` every `seconds` until `stop` is set, so that none that
    a scheduler started (--orphan-seconds, runtime/orphan.py) takes itself for orphaned; a
    stopped agent (its channel closed) leaves the list. A thread's target."""
    while not stop.wait(seconds):
        for handle in list(handles):
            try:
                handle.client.healthy()
            except Exception:  # noqa: BLE001 (a stopped agent's closed channel)
                handles.remove(handle)


def process_exists(pid: int) -> bool:
    """Whether a process of this host has that id (the collector that started something)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
