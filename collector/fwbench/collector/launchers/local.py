"""Local launcher: the agent's virtual environment (made from its manifest, see
agents/environments.py, or one that already exists: `--python`, agents/existing.py), the agent
as its own process on free loopback ports, health-checked, and always stopped at the end."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.environments import AgentEnvironment, environment_for
from fwbench.collector.agents.existing import ExistingEnvironment
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.scratch import scratch_folder
from fwbench.collector.agents.security import AGENT_VARIABLES
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import (
    START_TIMEOUT_SECONDS,
    AgentHandle,
    LauncherKind,
    LaunchSettings,
    Placement,
    free_ports,
)
from fwbench.collector.launchers.options import LauncherOptions
from fwbench.collector.launchers.python_options import PythonOptions
from fwbench.collector.launchers.reaping import stop_process
from fwbench.spec import startup

# How long close() waits for abandoned starts to stop their processes (SIGTERM, then SIGKILL
# after ProcessAgent.stop's grace) and remove their folders; an environment build under way
# is not interrupted, and may take longer.
CLOSE_WAIT_SECONDS = 30.0


@dataclass
class ProcessAgent(AgentHandle):
    """An agent process this collector started."""

    kind: ClassVar[str] = LauncherKind.LOCAL.value
    sees_files: ClassVar[bool] = True

    process: subprocess.Popen[bytes] | None = None
    env_path: Path | None = None
    python: Path | None = None  # the interpreter it runs with
    existing: bool = False  # an environment the collector did not make (--python)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_reason(self) -> str:
        code = self.process.poll() if self.process else None
        if code is None:
            return "agent process is running but not answering"
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        return f"agent process {how}{self._log_tail()}"

    def settle(self, seconds: float) -> None:
        if self.process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=seconds)

    def stop(self, grace_seconds: float = 10.0) -> None:
        self.client.close()
        if self.process is not None:  # never waits without limit (reaping.py)
            stop_process(self.process, self.name, grace_seconds)

    def identity(self) -> dict[str, Any]:
        return {
            **super().identity(),
            "environment_source": "existing" if self.existing else "built",
            "agent_python": str(self.python or ""),
        }

    def metadata(self) -> dict[str, Any]:
        return {
            **super().metadata(),
            "environment_path": str(self.env_path or "") or None,
            "environment_source": "existing" if self.existing else "built",
            "python": str(self.python or "") or None,
        }


class LocalLauncher:
    """Agents as processes in their virtual environments (Launcher)."""

    kind = LauncherKind.LOCAL
    options: ClassVar[type[LauncherOptions]] = PythonOptions
    holds_allocation = False

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings
        self._closed = threading.Event()
        self._starting = 0  # starts under way, in any thread
        self._changed = threading.Condition()

    def start(
        self,
        manifest: AgentManifest,
        instance: Instance,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
        abandon: threading.Event | None = None,
    ) -> AgentHandle:
        if self._closed.is_set():
            raise AgentUnavailable(f"not starting {instance}: the run is ending")
        with self._changed:
            self._starting += 1
        try:
            return start_local(
                manifest,
                self.settings.log_dir,
                report=self.settings.report,
                timeout_seconds=self.settings.start_timeout_seconds,
                threads=threads,
                instance=instance,
                abandon=either(self._closed, abandon),
                python=self.settings.own(PythonOptions).python_for(manifest.name),
                extra_environment={**self.settings.environment, **(extra_environment or {})},
            )
        finally:
            with self._changed:
                self._starting -= 1
                self._changed.notify_all()

    def place_world(self, manifest: AgentManifest, world: Instance, threads: int) -> Placement:
        """Processes on this host: everything on the loopback, on distinct ports free now."""
        rendezvous, *peers = free_ports(world.ranks + 1)
        return Placement("127.0.0.1", rendezvous, [f"127.0.0.1:{p}" for p in peers], "local")

    def close(self) -> None:
        """Abandons the starts still under way (an interrupt during start-up) and waits until
        each has stopped its process and removed its ports folder: left to finish on their
        own, they would outlive the collector (a worker thread interrupted in join() can be
        taken for finished, and the interpreter does not wait for it at exit). Processes
        started are their handles' to stop, and die with the collector (--exit-with-parent)."""
        self._closed.set()
        with self._changed:
            self._changed.wait_for(lambda: self._starting == 0, timeout=CLOSE_WAIT_SECONDS)

    @staticmethod
    def sweep_orphans() -> None:
        """Nothing: an agent process dies with its collector (--exit-with-parent)."""


class Either:
    """Set when either event is: the run ending, or the world this start belongs to failing."""

    def __init__(self, *events: threading.Event) -> None:
        self.events = events

    def is_set(self) -> bool:
        return any(event.is_set() for event in self.events)


def either(run: threading.Event, world: threading.Event | None) -> threading.Event | Either:
    return run if world is None else Either(run, world)


def start_local(
    manifest: AgentManifest,
    log_dir: Path,
    report: Callable[[str], None] = lambda _: None,
    timeout_seconds: float = START_TIMEOUT_SECONDS,
    threads: int = 0,
    instance: Instance | None = None,
    abandon: threading.Event | Either | None = None,
    python: str | None = None,
    extra_environment: Mapping[str, str] | None = None,
) -> ProcessAgent:
    """Prepares the environment if needed (`python`: an existing interpreter, checked and
    never installed into) and starts the agent; raises AgentUnavailable, EnvironmentBuildError
    or EnvironmentUnsuitable. The process is in its own session, so a Ctrl-C in the terminal
    reaches only the collector, which then stops it in order. `abandon`, once set, ends the
    start (AgentUnavailable) with the process stopped and its ports folder removed. `instance`:
    by default the agent alone."""
    instance = instance or Instance(manifest.name)
    name = str(instance)
    abandoned = abandon.is_set if abandon is not None else lambda: False
    env: AgentEnvironment | ExistingEnvironment
    env = ExistingEnvironment(manifest, Path(python)) if python else environment_for(manifest)
    env.ensure(report)
    if abandoned():
        raise AgentUnavailable(f"the start of {name} was abandoned: the run is ending")
    # The collector's own token and TLS files are not its agents' (agents/security.py).
    variables = {k: v for k, v in os.environ.items() if k not in AGENT_VARIABLES}
    variables.update(manifest.env)
    if isinstance(env, ExistingEnvironment):
        variables.update(env.variables())
    variables.update(extra_environment or {})
    suffix = ""
    if threads:
        variables.update(startup.thread_variables(threads))
        suffix = f"-threads{threads}"
    ports_dir = scratch_folder("ports")
    handle = ProcessAgent(
        instance=instance,
        address="",
        client=AgentClient(name, "unset"),
        manifest=manifest,
        threads=threads,
        log_path=log_dir / f"{name}{suffix}.log",
        env_path=env.path,
        python=env.python,
        existing=isinstance(env, ExistingEnvironment),
    )
    try:
        command = _command(env.python, manifest, ports_dir)
        handle.process = _spawn(command, handle, variables, env.folder)
        handle.host_pid = handle.process.pid
        ports = _wait_for_ports(handle, ports_dir / "ports.json", timeout_seconds, abandoned)
        handle.address = f"127.0.0.1:{ports['grpc']}"
        if ports.get("metrics"):
            handle.metrics_address = f"127.0.0.1:{ports['metrics']}"
        handle.client = AgentClient(name, handle.address)

        def alive() -> bool:
            if abandoned():
                raise AgentUnavailable(f"the start of {name} was abandoned: the run is ending")
            return handle.alive()

        handle.client.wait_healthy(timeout_seconds, alive=alive, why=handle.exit_reason)
    except BaseException:
        handle.stop()
        raise
    finally:
        shutil.rmtree(ports_dir, ignore_errors=True)
    return handle


def _command(python: Path, manifest: AgentManifest, ports_dir: Path) -> list[str]:
    # -P, and run in its environment's folder (_spawn): the agent never imports from the
    # caller's working directory (agents/pythons.py).
    return startup.AgentCommand(
        python,
        manifest.plugin,
        manifest.name,
        manifest.variant,
        ports_file=ports_dir / "ports.json",
        exit_with_parent=os.getpid(),
    ).argv()


def _spawn(
    command: list[str], handle: ProcessAgent, variables: dict[str, str], folder: Path
) -> subprocess.Popen[bytes]:
    assert handle.log_path is not None
    with handle.log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            cwd=folder,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=variables,
            start_new_session=True,
        )


def _wait_for_ports(
    handle: ProcessAgent, ports_file: Path, timeout: float, abandoned: Callable[[], bool]
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not abandoned():
        if ports_file.exists():
            return startup.read_ports(ports_file)
        if not handle.alive():
            raise AgentUnavailable(f"agent {handle.name} failed to start: {handle.exit_reason()}")
        time.sleep(0.1)
    if abandoned():
        raise AgentUnavailable(f"the start of {handle.name} was abandoned: the run is ending")
    raise AgentUnavailable(
        f"agent {handle.name} did not start within {timeout:.0f} s: {handle.exit_reason()}"
    )
