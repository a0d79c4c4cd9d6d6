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

import os
import socket
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.environments import AgentEnvironment, environment_for
from fwbench.collector.agents.existing import ExistingEnvironment
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.scratch import scratch_folder
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import (
    AgentHandle,
    LauncherKind,
    LaunchSettings,
    Placement,
    keep_alive,
    keepalive_seconds,
)
from fwbench.collector.launchers.options import LauncherOptions
from fwbench.collector.launchers.slurm_agent import SlurmAgent
from fwbench.collector.launchers.slurm_jobs import (
    COMMENT_PREFIX,
    POLL_SECONDS,
    cancel_orphans,
    cancel_run_jobs,
    end_jobs,
    job_state,
    options_for,
    slurm_command,
)
from fwbench.collector.launchers.slurm_options import SlurmOptions
from fwbench.collector.launchers.slurm_scripts import (
    IMAGE_PYTHON,
    InImage,
    agent_command,
    agent_script,
    blind_port,
    world_script,
)
from fwbench.spec import startup

Environment = AgentEnvironment | ExistingEnvironment | InImage


class SlurmLauncher:
    """Agents as Slurm batch jobs (Launcher)."""

    kind = LauncherKind.SLURM
    options: ClassVar[type[LauncherOptions]] = SlurmOptions
    holds_allocation = True

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings
        self._closed = threading.Event()
        self._started: list[AgentHandle] = []
        # World instance -> (its job, the folder of its ranks' ports files, its environment).
        self._worlds: dict[Instance, tuple[str, Path, Environment]] = {}
        # Agents on a cluster listen on their nodes' addresses: each demands the run's own
        # random token and serves TLS with the run's own certificate (files of this user's
        # only, on the filesystem the nodes share).
        from fwbench.collector.agents.run_tls import RunCredentials  # cryptography: on use

        credentials = RunCredentials.make(settings.run_id)
        self._files = credentials.write(scratch_folder("ports"))
        self._security = credentials.channel()
        self._keepalive = threading.Thread(
            target=keep_alive, args=(self._started, self._closed, keepalive_seconds()), daemon=True
        )
        self._keepalive.start()
        self.own = settings.own(SlurmOptions)
        self._container = self.own.container()

    def _image(self, manifest: AgentManifest) -> str:
        """--slurm-container: the agent's image, as its runtime names it ("" without)."""
        if self._container is None:
            return ""
        tag = self.settings.image_tag(manifest) if self.settings.image_tag else manifest.name
        return self._container.registry + tag

    def _environment(
        self, manifest: AgentManifest, threads: int, extra: Mapping[str, str] | None = None
    ) -> tuple[Environment, dict[str, str]]:
        """The agent's environment (made or checked; in its image: nothing on the host) and
        the variables its job exports."""
        python = self.own.python_for(manifest.name)
        env: Environment
        if self._container is not None:
            env = InImage(IMAGE_PYTHON, self._files.token.parent)  # mounted in the container
        elif python:
            env = ExistingEnvironment(manifest, Path(python))
        else:
            env = environment_for(manifest)
        env.ensure(self.settings.report)
        variables = dict(manifest.env)
        if isinstance(env, ExistingEnvironment):
            variables.update(env.variables())
        variables.update(self.settings.environment)
        variables.update(startup.thread_variables(threads))
        variables.update(extra or {})
        return env, variables

    def start(
        self,
        manifest: AgentManifest,
        instance: Instance,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
        abandon: threading.Event | None = None,  # not used: a world is one job (base.py)
    ) -> AgentHandle:
        """One agent, its own job; or, for a rank of a world place_world submitted, that
        rank of the world's job."""
        if self._closed.is_set():
            raise AgentUnavailable(f"not submitting {instance}: the run is ending")
        name, world = str(instance), instance.world
        suffix = f"-threads{threads}" if threads else ""
        log = self.settings.log_dir / f"{name}{suffix}.log"
        if instance.rank is not None and world in self._worlds:
            job, folder, env = self._worlds[world]
            ports = folder / f"ports-{instance.rank}.json"
            log = self.settings.log_dir / f"{world}.log"
        else:
            env, variables = self._environment(manifest, threads, extra_environment)
            ports = scratch_folder("ports") / "ports.json"
            command = agent_command(env.python, manifest, ports, self._files)
            folders = [ports.parent, self._files.token.parent]
            script = agent_script(
                variables,
                command,
                self._container,
                self._image(manifest),
                folders,
                manifest.requires_gpu,
            )
            job = self._submit(instance, script, log, [f"--chdir={env.folder}"])
        handle = SlurmAgent(
            instance=instance,
            address="",
            client=AgentClient(name, "unset"),
            manifest=manifest,
            threads=threads,
            log_path=log,
            python=env.python,
            existing=isinstance(env, ExistingEnvironment),
            image=self._image(manifest),
            job_id=job,
        )
        try:
            found = self._wait_for_ports(handle, ports)
            placed = slurm_command("squeue", "-h", "-j", job, "-o", "%N|%P")
            node, _, handle.partition = placed.partition("|")
            handle.node = str(found.get("host") or "") or node
            handle.address = f"{handle.node}:{found['grpc']}"
            if found.get("metrics"):
                handle.metrics_address = f"{handle.node}:{found['metrics']}"
            handle.client = AgentClient(name, handle.address, self._security)
            handle.client.wait_healthy(
                self.settings.start_timeout_seconds, alive=handle.alive, why=handle.exit_reason
            )
        except BaseException:
            handle.stop(grace_seconds=2.0)
            raise
        self._started.append(handle)
        return handle

    def _submit(
        self, instance: Instance, script: str, log: Path, extra: list[str] | None = None
    ) -> str:
        run_id, name = self.settings.run_id, str(instance)
        comment = f"{COMMENT_PREFIX}:{socket.gethostname()}:{os.getpid()}:{run_id}"
        chosen = options_for(instance.agent, self.own.slurm_options)
        options = [f"--{option}" for option in chosen]
        command = ["sbatch", "--parsable", f"--job-name=fwbench-{run_id}-{name}"]
        command += [f"--output={log}", f"--comment={comment}", "--export=NONE"]
        command += [*(extra or []), *options]
        try:
            done = subprocess.run(
                command, input=script, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise AgentUnavailable(f"sbatch failed for {name}: {error}") from None
        if done.returncode != 0:
            raise AgentUnavailable(f"Slurm refused {name}: {done.stderr.strip()[:500]}")
        return done.stdout.strip().split(";")[0]

    def _wait_for_ports(self, handle: SlurmAgent, ports: Path) -> dict[str, Any]:
        """The agent's ports once it is up; its queue wait counts against the start timeout."""
        deadline = time.monotonic() + self.settings.start_timeout_seconds
        while time.monotonic() < deadline and not self._closed.is_set():
            if ports.exists():
                return startup.read_ports(ports)
            state = job_state(handle.job_id)
            if state not in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
                raise AgentUnavailable(
                    f"agent {handle.name} failed to start: {handle.exit_reason()}"
                )
            time.sleep(POLL_SECONDS)
        why = "the run is ending" if self._closed.is_set() else "did not start in time"
        raise AgentUnavailable(f"agent {handle.name} {why}: {handle.exit_reason()}")

    def place_world(self, manifest: AgentManifest, world: Instance, threads: int) -> Placement:
        """One batch job for all the world's ranks, so that they are co-scheduled: one
        allocation of `world.ranks` tasks, one srun step whose tasks start the agent with torchrun's
        variables from Slurm's (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS; rendezvous on the
        allocation's first node). Each rank's start() then waits for its own ports file."""
        if self._closed.is_set():
            raise AgentUnavailable(f"not submitting {world}: the run is ending")
        devices = world.devices  # NAME~w1xD: a task of D devices
        extra = {startup.LOCAL_DEVICES: str(devices)} if devices > 1 else {}
        env, variables = self._environment(manifest, threads, extra)
        folder = scratch_folder("ports")
        port = blind_port(world.ranks + 1)  # on a node the collector cannot probe
        agent = agent_command(env.python, manifest, Path("PORTS"), self._files)
        script = world_script(
            variables,
            agent,
            folder,
            port,
            self._container,
            self._image(manifest),
            manifest.requires_gpu,
            self._files.token.parent,
        )
        log = self.settings.log_dir / f"{world}.log"
        options = [f"--ntasks={world.ranks}", *([f"--cpus-per-task={threads}"] if threads else [])]
        options.append(f"--chdir={env.folder}")  # not the caller's folder (agents/pythons.py)
        job = self._submit(world, script, log, options)
        self._worlds[world] = (job, folder, env)
        return Placement(
            "(the allocation's first node)",
            port,
            [],
            "slurm",
            release=lambda: end_jobs([job], 10.0),
            pins_cpus=False,  # Slurm places and binds its tasks
        )

    def close(self) -> None:
        self._closed.set()
        cancel_run_jobs(self.settings.run_id)

    @staticmethod
    def sweep_orphans() -> None:
        cancel_orphans()


__all__ = ["SlurmAgent", "SlurmLauncher"]
