"""Kubernetes launcher: each agent is an Indexed Job of one pod with its headless Service
(kubernetes_objects.py, what `collector k8s render` prints), created through the cluster's API
(kubernetes_api.py) on a node Kubernetes chooses, from the agent's image in `registry`. The
collector watches the pod until it runs, talks to POD_IP:GRPC_PORT, measures as usual, and
deletes every object labelled with the run however the run ends: stop() deletes an agent's Job
(and pods) and Service, close() everything of the run, and the next run in that namespace
deletes what a killed collector left (each object's annotation names the collector, HOST:PID).
A world of N ranks is one Indexed Job of N pods. The collector must reach the pods' IPs (it runs
in the cluster, or on a host routed to the pod network)."""

from __future__ import annotations

import itertools
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fwbench.collector.agents.client import AgentClient, AgentUnavailable
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import (
    AgentHandle,
    LauncherKind,
    LaunchSettings,
    Placement,
    keep_alive,
    keepalive_seconds,
    orphan_seconds,
)
from fwbench.collector.launchers.kubernetes_api import COLLECTOR_ANNOTATION, Cluster
from fwbench.collector.launchers.kubernetes_objects import (
    PEER_PORT,
    RENDEZVOUS_PORT,
    PodShape,
    dns_name,
    token_secret,
    world_objects,
)
from fwbench.collector.launchers.kubernetes_options import KubernetesOptions
from fwbench.collector.launchers.options import LauncherOptions
from fwbench.spec import startup


@dataclass
class KubernetesAgent(AgentHandle):
    """An agent running in a pod of a Job this collector created."""

    kind: ClassVar[str] = LauncherKind.KUBERNETES.value

    cluster: Cluster | None = None
    job: str = ""
    pod: str = ""
    node: str = ""
    image: str = ""
    owns_job: bool = True  # False for a rank: its world's Placement.release deletes the Job
    stopped: threading.Event = field(default_factory=threading.Event)

    def _state(self) -> str:
        from fwbench.collector.launchers.kubernetes_api import pod_state

        pod = self.cluster.pod(self.pod) if self.cluster and self.pod else None
        if pod is None:
            return "gone"
        return "running" if pod_state(pod)[0] else pod_state(pod)[2]

    def alive(self) -> bool:
        return not self.stopped.is_set() and self._state() == "running"

    def exit_reason(self) -> str:
        namespace = self.cluster.namespace if self.cluster else "?"
        tail = self.cluster.log_tail(self.pod) if self.cluster and self.pod else ""
        return f"pod {namespace}/{self.pod or '?'} on {self.node or '?'}: {self._state()}{tail}"

    def stop(self, grace_seconds: float = 10.0) -> None:
        self.client.close()
        if self.stopped.is_set():
            return
        self.stopped.set()
        if self.cluster is not None and self.pod and self.log_path is not None:
            self.cluster.save_log(self.pod, self.log_path)  # before the pod goes with its Job
        if self.owns_job and self.cluster is not None and self.job:
            self.cluster.delete_job(self.job, grace_seconds)

    def identity(self) -> dict[str, Any]:
        namespace = self.cluster.namespace if self.cluster else ""
        return {
            **super().identity(),
            "image": self.image,
            "environment_source": "image",
            "node": self.node,
            "scheduler_job": f"kubernetes:{namespace}/{self.job}",
        }

    def metadata(self) -> dict[str, Any]:
        namespace = self.cluster.namespace if self.cluster else ""
        return {
            **super().metadata(),
            "image": self.image,
            "kubernetes_job": f"{namespace}/{self.job}",
            "pod": self.pod,
            "node": self.node,
        }


class KubernetesLauncher:
    """Agents as pods of Indexed Jobs (Launcher). Constructing it reaches the cluster and
    deletes what killed collectors of this host left in the namespace."""

    kind = LauncherKind.KUBERNETES
    options: ClassVar[type[LauncherOptions]] = KubernetesOptions
    holds_allocation = True  # an idle pod holds its requests: agents start one at a time

    def __init__(self, settings: LaunchSettings) -> None:
        self.settings = settings
        try:
            self.k8s = settings.own(KubernetesOptions).settings()
        except ValueError as error:
            raise AgentUnavailable(str(error)) from None
        self.cluster = Cluster(self.k8s.namespace)
        self.cluster.delete_orphans()
        self.collector = f"{socket.gethostname()}:{os.getpid()}"
        self._count = itertools.count(1)
        self._closed = threading.Event()
        self._started: list[AgentHandle] = []
        self._worlds: dict[Instance, str] = {}  # a world -> its Job
        # Agent pods listen on their pod's addresses: each demands the run's own random token
        # and serves TLS with the run's own certificate, which reach it from a Secret (never
        # in a pod's spec); the token travels with every call, inside TLS.
        from fwbench.collector.agents.run_tls import RunCredentials  # cryptography: on use

        credentials = RunCredentials.make(settings.run_id)
        self._secret = dns_name(f"fwbench-{settings.run_id}-token")
        self.cluster.create(
            [
                token_secret(
                    self._secret,
                    settings.run_id,
                    credentials.token,
                    self.k8s.namespace,
                    self._notes(),
                    (credentials.cert, credentials.key),
                )
            ]
        )
        self._security = credentials.channel()
        keepalive = keepalive_seconds()
        self._keepalive = threading.Thread(
            target=keep_alive, args=(self._started, self._closed, keepalive), daemon=True
        )
        self._keepalive.start()

    def _notes(self) -> dict[str, str]:
        return {COLLECTOR_ANNOTATION: self.collector}

    def image(self, manifest: AgentManifest) -> str:
        tag = self.settings.image_tag(manifest) if self.settings.image_tag else manifest.name
        return self.k8s.registry + tag

    def _create(
        self, manifest: AgentManifest, instance: Instance, size: int, threads: int, world: bool
    ) -> str:
        """The Service and Job of `instance` as a world of `size` pods (`world`: ranks told
        torchrun's variables, also a world of one; else one agent); returns the Job's name."""
        if self._closed.is_set():
            raise AgentUnavailable(f"not creating {instance}: the run is ending")
        base = dns_name(f"fwbench-{self.settings.run_id}-{instance}", 50)
        name = f"{base}-{next(self._count)}"
        env = {**self.settings.environment, startup.ORPHAN_SECONDS: f"{orphan_seconds():g}"}
        env.update(startup.thread_variables(threads))
        if world and instance.devices > 1:  # NAME~w1xD: one pod of D devices
            env[startup.LOCAL_DEVICES] = str(instance.devices)
        gpus = 1 if manifest.requires_gpu else 0
        shape = PodShape(self.k8s.cpus, self.k8s.memory, gpus)
        objects = world_objects(
            manifest,
            self.image(manifest),
            self.settings.run_id,
            size,
            shape,
            self.k8s.namespace,
            name,
            self._notes(),
            env,
            self._secret,
            alone=not world,
            options=self.k8s.pods,
        )
        pods = f"{size} pod{'s' if size > 1 else ''}"
        self.settings.report(f"creating Job {self.k8s.namespace}/{name} ({pods})")
        self.cluster.create(objects)
        return name

    def start(
        self,
        manifest: AgentManifest,
        instance: Instance,
        threads: int,
        extra_environment: Mapping[str, str] | None = None,
        abandon: threading.Event | None = None,  # not used: a world is one job (base.py)
    ) -> AgentHandle:
        """One agent, its own Job of one pod; or a rank of the Job place_world created, whose
        pod already has the world's variables (extra_environment is the same)."""
        name, rank = str(instance), instance.rank
        deadline = time.monotonic() + self.settings.start_timeout_seconds
        placed = self._worlds.get(instance.world) if rank is not None else None
        owns = placed is None
        job = placed or self._create(manifest, instance, 1, threads, False)
        handle = KubernetesAgent(
            instance=instance,
            address="",
            client=AgentClient(name, "unset"),
            manifest=manifest,
            threads=threads,
            cluster=self.cluster,
            job=job,
            image=self.image(manifest),
            owns_job=owns,
            log_path=self.settings.log_dir / f"{name}{f'-threads{threads}' if threads else ''}.log",
        )
        try:
            pod = self.cluster.wait_for_pod(
                job, 0 if owns else int(rank or 0), deadline, self._closed.is_set
            )
            handle.pod, handle.node = pod.metadata.name, pod.spec.node_name or ""
            address = pod.status.pod_ip
            handle.address = f"{address}:{manifest.grpc_port}"
            handle.metrics_address = f"{address}:{manifest.metrics_port}"
            handle.client = AgentClient(name, handle.address, self._security)
            handle.client.wait_healthy(max(deadline - time.monotonic(), 1.0), alive=handle.alive)
        except AgentUnavailable as error:
            why = f"{error}: {handle.exit_reason()}" if handle.pod else str(error)
            handle.stop(grace_seconds=2.0)
            raise AgentUnavailable(f"agent {name} did not start on Kubernetes: {why}") from None
        except BaseException:
            handle.stop(grace_seconds=2.0)
            raise
        self._started.append(handle)
        return handle

    def place_world(self, manifest: AgentManifest, world: Instance, threads: int) -> Placement:
        """One Indexed Job of `world.ranks` pods: every rank is told its index (RANK), rank 0's
        stable hostname under the headless Service (MASTER_ADDR) and every rank's
        (FWBENCH_PEERS)."""
        size = world.ranks
        job = self._create(manifest, world, size, threads, True)
        self._worlds[world] = job
        return Placement(
            f"{job}-0.{job}",
            RENDEZVOUS_PORT,
            [f"{job}-{rank}.{job}:{PEER_PORT}" for rank in range(size)],
            "kubernetes",
            release=lambda: self.cluster.delete_job(job, grace_seconds=2.0),
            pins_cpus=False,  # the kubelet places the pods and their CPUs
        )

    def close(self) -> None:
        self._closed.set()
        self.cluster.delete_run(dns_name(self.settings.run_id))

    @staticmethod
    def sweep_orphans() -> None:
        """Nothing here: the namespace is swept as the launcher is made (it needs --k8s)."""


__all__ = ["KubernetesAgent", "KubernetesLauncher"]
