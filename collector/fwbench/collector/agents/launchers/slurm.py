"""Slurm launcher: each agent is a Slurm batch job that starts it on a node Slurm chooses, in the
agent's environment (built from its manifest, or an existing interpreter: `--python`). The
collector learns the agent's address when it is up (the agent writes its ports to a file; the
job's node comes from squeue), measures as usual, and cancels every job it submitted however
the run ends: stop() and close() scancel their jobs, and the next run's orphan sweep cancels
what a killed collector left (each job's comment names the collector's host and pid).

The cluster is the one the environment points at (SLURM_CONF, or the host's configuration).
On a real cluster the agents' environments (FWBENCH_ENV_DIR) and the collector's scratch
folder (TMPDIR) must be on a filesystem the nodes share (docs/cluster.md)."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.environments import AgentEnvironment, environment_for
from fwbench.collector.agents.existing import ExistingEnvironment
from fwbench.collector.agents.launchers.base import (
    AgentHandle,
    LauncherKind,
    LaunchSettings,
    Placement,
    free_port,
    process_exists,
)
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.scratch import scratch_folder
from fwbench.collector.agents.security import AGENT_VARIABLES

COMMENT_PREFIX = "fwbench"  # job comment: fwbench:HOST:PID:RUN_ID
# sbatch options the launcher sets itself; --slurm cannot override them.
RESERVED = frozenset({"parsable", "job-name", "output", "comment", "wrap", "export"})
POLL_SECONDS = 0.5
# An agent job ends itself when no call has reached it for ORPHAN_SECONDS (runtime/orphan.py):
# the collector calls each of its agents' health service every KEEPALIVE_SECONDS while the run
# lasts, so a collector killed outright leaves no job behind for longer than that.
ORPHAN_SECONDS = 30.0
KEEPALIVE_SECONDS = 5.0


def _slurm(*args: str, timeout: float = 30) -> str:
    """A Slurm command's stdout; raises AgentUnavailable with its stderr when it fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AgentUnavailable(f"{args[0]} failed: {error}") from None
    if done.returncode != 0:
        raise AgentUnavailable(f"{' '.join(args[:2])} failed: {done.stderr.strip()[:500]}")
    return done.stdout.strip()


def job_state(job_id: str) -> str:
    """RUNNING, PENDING, ... or "" once Slurm no longer lists the job (it ended)."""
    try:
        return _slurm("squeue", "-h", "-j", job_id, "-o", "%T")
    except AgentUnavailable:
        return ""


def cancel_jobs(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30, check=False)


def _our_jobs(chosen: Any) -> list[str]:
    try:
        listed = _slurm("squeue", "-h", "-o", "%i|%k")
    except AgentUnavailable:
        return []  # no cluster reachable: nothing of ours can be running there
    jobs = []
    for line in listed.splitlines():
        job_id, _, comment = line.partition("|")
        parts = comment.split(":")
        if len(parts) == 4 and parts[0] == COMMENT_PREFIX and chosen(*parts[1:]):
            jobs.append(job_id.strip())
    return jobs


def cancel_run_jobs(run_id: str) -> None:
    cancel_jobs(_our_jobs(lambda host, pid, run: run == run_id))


def cancel_orphans() -> None:
    """Cancels jobs that collectors on this host submitted and that outlived them."""

    def orphaned(host: str, pid: str, run: str) -> bool:
        return host == socket.gethostname() and pid.isdigit() and not process_exists(int(pid))

    cancel_jobs(_our_jobs(orphaned))


@dataclass
class SlurmAgent(AgentHandle):
    """An agent running as a Slurm job this collector submitted."""

    kind: ClassVar[str] = LauncherKind.SLURM.value

    job_id: str = ""
    node: str = ""
    python: Path | None = None
    existing: bool = False

    def alive(self) -> bool:
        return job_state(self.job_id) in ("RUNNING", "COMPLETING")

    def exit_reason(self) -> str:
        state = job_state(self.job_id) or "ended"
        return f"Slurm job {self.job_id} on {self.node or '?'}: {state}{self._log_tail()}"

    def stop(self, grace_seconds: float = 10.0) -> None:
        self.client.close()
        if not self.job_id or not job_state(self.job_id):
            return
        cancel_jobs([self.job_id])  # SIGTERM to the agent, SIGKILL after Slurm's KillWait
        deadline = time.monotonic() + grace_seconds
        while job_state(self.job_id) and time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
        if job_state(self.job_id):
            subprocess.run(["scancel", "-s", "KILL", self.job_id], capture_output=True, check=False)

    def identity(self) -> dict[str, Any]:
        return {
            **super().identity(),
            "environment_source": "existing" if self.existing else "built",
            "agent_python": str(self.python or ""),
            "node": self.node,
            "scheduler_job": f"slurm:{self.job_id}",
        }

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "slurm_job": self.job_id, "node": self.node}


class SlurmLauncher:
    """Agents as Slurm batch jobs (Launcher)."""

    kind = LauncherKind.SLURM

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings
        self._closed = threading.Event()
        self._started: list[SlurmAgent] = []
        self._keepalive = threading.Thread(target=self._keep_alive, daemon=True)
        self._keepalive.start()

    def _keep_alive(self) -> None:
        """Calls every agent started so far, so that none takes itself for orphaned."""
        while not self._closed.wait(KEEPALIVE_SECONDS):
            for handle in list(self._started):
                try:
                    handle.client.healthy()
                except Exception:  # noqa: BLE001 (a stopped agent's closed channel)
                    self._started.remove(handle)

    def start(
        self,
        manifest: AgentManifest,
        instance: str,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
    ) -> AgentHandle:
        if self._closed.is_set():
            raise AgentUnavailable(f"not submitting {instance}: the run is ending")
        name = instance or manifest.name
        python = self.settings.pythons.get(manifest.name) or self.settings.pythons.get("")
        env: AgentEnvironment | ExistingEnvironment
        env = ExistingEnvironment(manifest, Path(python)) if python else environment_for(manifest)
        env.ensure(self.settings.report)
        variables = dict(manifest.env)
        if isinstance(env, ExistingEnvironment):
            variables.update(env.variables())
        if threads:
            variables["FWBENCH_THREADS"] = str(threads)
        variables.update(extra_environment or {})
        ports = scratch_folder("ports") / "ports.json"
        suffix = f"-threads{threads}" if threads else ""
        handle = SlurmAgent(
            name=name,
            address="",
            client=AgentClient(name, "unset"),
            manifest=manifest,
            threads=threads,
            log_path=self.settings.log_dir / f"{name}{suffix}.log",
            python=env.python,
            existing=isinstance(env, ExistingEnvironment),
        )
        script = _script(env.python, manifest, ports, variables)
        handle.job_id = self._submit(name, script, self.settings.log_dir / f"{name}{suffix}.log")
        try:
            found = self._wait_for_ports(handle, ports)
            handle.node = _slurm("squeue", "-h", "-j", handle.job_id, "-o", "%N")
            handle.address = f"{handle.node}:{found['grpc']}"
            if found.get("metrics"):
                handle.metrics_address = f"{handle.node}:{found['metrics']}"
            handle.client = AgentClient(name, handle.address)
            handle.client.wait_healthy(self.settings.start_timeout_seconds, alive=handle.alive)
        except BaseException:
            handle.stop(grace_seconds=2.0)
            raise
        self._started.append(handle)
        return handle

    def _submit(self, name: str, script: str, log: Path) -> str:
        run_id = self.settings.run_id
        comment = f"{COMMENT_PREFIX}:{socket.gethostname()}:{os.getpid()}:{run_id}"
        options = [f"--{option}" for option in self.settings.slurm_options]
        command = ["sbatch", "--parsable", f"--job-name=fwbench-{run_id}-{name}"]
        command += [f"--output={log}", f"--comment={comment}", "--export=NONE", *options]
        try:
            done = subprocess.run(
                command, input=script, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise AgentUnavailable(f"sbatch failed for {name}: {error}") from None
        if done.returncode != 0:
            raise AgentUnavailable(f"Slurm refused {name}: {done.stderr.strip()[:500]}")
        return done.stdout.strip().split(";")[0]

    def _wait_for_ports(self, handle: SlurmAgent, ports: Path) -> dict[str, int]:
        """The agent's ports once it is up; its queue wait counts against the start timeout."""
        deadline = time.monotonic() + self.settings.start_timeout_seconds
        while time.monotonic() < deadline and not self._closed.is_set():
            if ports.exists():
                found: dict[str, int] = json.loads(ports.read_text())
                return found
            state = job_state(handle.job_id)
            if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                raise AgentUnavailable(
                    f"agent {handle.name} failed to start: {handle.exit_reason()}"
                )
            time.sleep(POLL_SECONDS)
        why = "the run is ending" if self._closed.is_set() else "did not start in time"
        raise AgentUnavailable(f"agent {handle.name} {why}: {handle.exit_reason()}")

    def place_world(self, instance: str, size: int) -> Placement:
        raise AgentUnavailable(
            f"{instance}: worlds of several ranks are not scheduled by Slurm yet (one allocation "
            "for all ranks is the next step: docs/cluster.md); use --launcher local or docker"
        )

    def close(self) -> None:
        self._closed.set()
        cancel_run_jobs(self.settings.run_id)


def _script(
    python: Path, manifest: AgentManifest, ports: Path, variables: Mapping[str, str]
) -> str:
    """The batch script: the agent's variables, then the agent, listening on every address of
    its node (the collector is elsewhere)."""
    lines = ["#!/bin/sh"]
    lines += [
        f"export {key}={shlex.quote(value)}"
        for key, value in variables.items()
        if key not in AGENT_VARIABLES
    ]
    command = [
        str(python), "-P", "-m", "fwbench.runtime.cli", "--plugin", manifest.plugin,
        "--name", manifest.name, "--variant", manifest.variant, "--host", "0.0.0.0",
        "--port", "0", "--metrics-port", "0", "--ports-file", str(ports),
        "--orphan-seconds", f"{ORPHAN_SECONDS:g}",
    ]  # fmt: skip
    lines.append("exec " + shlex.join(command))
    return "\n".join(lines) + "\n"


__all__ = ["SlurmAgent", "SlurmLauncher", "cancel_orphans", "free_port"]
