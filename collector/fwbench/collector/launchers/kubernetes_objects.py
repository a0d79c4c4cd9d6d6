"""Kubernetes manifests for agents and distributed worlds (`collector k8s render`, and what
`collector run --launcher kubernetes` creates: launchers/kubernetes.py; docs/cluster.md): per
agent and world size, an Indexed Job (one pod per rank; a single agent is a world of one) and
the headless Service its pods' stable hostnames live under, so every rank reaches rank 0 at
JOB-0.SERVICE, and the NetworkPolicy and scheduling of kubernetes_policy.py; optionally a
Prometheus Operator PodMonitor.

What each pod is told: torchrun's variables (WORLD_SIZE; RANK from the Job's completion index;
MASTER_ADDR = rank 0's hostname; MASTER_PORT), FWBENCH_PEERS (every rank's hostname and peer
port, for TensorFlow's TF_CONFIG), FWBENCH_THREADS = its whole CPUs. CPU requests equal limits
in whole cores (the kubelet's static CPU manager then gives the pod exclusive cores, in the
Guaranteed QoS class: memory request = limit too); CUDA agents get `nvidia.com/gpu` limits.
Labels name the run and agent, so a launcher can find and delete what it made. Pods meet the
"restricted" Pod Security Standard (POD_SECURITY, CONTAINER_SECURITY) and get no service-account
token; names and labels longer than DNS allows end in a hash, never collide (dns_name)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.launchers.kubernetes_policy import (
    PodOptions,
    network_policy,
    schedule,
)
from fwbench.spec import startup
from fwbench.spec.metadata import TOKEN_FILE_VARIABLE

RUN_LABEL = "fwbench.io/run"
AGENT_LABEL = "fwbench.io/agent"
WORLD_LABEL = "fwbench.io/world-size"
RENDEZVOUS_PORT = 29500  # MASTER_PORT, on rank 0's pod
PEER_PORT = 29501  # each rank's own (FWBENCH_PEERS)
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SECRET_KEY = "token"  # the key of the run's token in its Secret
CERT_KEY, KEY_KEY = "tls.crt", "tls.key"  # the keys of the agents' TLS pair in it
TOKEN_FOLDER = "/var/run/secrets/fwbench"  # where the Secret is mounted: TOKEN_FOLDER/token


# The "restricted" Pod Security Standard: a non-root user (any: the images' files are readable
# by all, and HOME is /tmp), the runtime's default seccomp profile, no capabilities, no
# privilege escalation. tests/cluster/pod_security.py checks every object against it.
AGENT_USER = 65532
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": AGENT_USER,
    "runAsGroup": AGENT_USER,
    "fsGroup": AGENT_USER,  # the token's file (mode 0440) is the pod group's
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
}


@dataclass(frozen=True)
class PodShape:
    """What each rank's pod asks for."""

    cpus: int = 1  # whole cores: requests = limits
    memory: str = "4Gi"
    gpus: int = 0  # nvidia.com/gpu per pod (CUDA agents: at least 1)


def dns_name(text: str, most: int = 63) -> str:
    """A DNS-1123 label of at most `most` characters: lower-case letters, digits and '-'. A
    longer one keeps its start and ends in a hash of the whole text, so that two texts that
    differ only past the limit (two long run ids) never share a name or a label."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "fwbench"
    if len(name) <= most:
        return name
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{name[: most - 9].rstrip('-')}-{digest}"


def world_objects(
    manifest: AgentManifest,
    image: str,
    run_id: str,
    world_size: int,
    shape: PodShape,
    namespace: str = "default",
    name: str = "",
    annotations: Mapping[str, str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    token_secret: str = "",
    alone: bool | None = None,
    options: PodOptions | None = None,
) -> list[dict[str, Any]]:
    """The Service and Indexed Job of one agent as a world of `world_size` pods (`alone`: one
    agent, without torchrun's variables; default: when there is one pod): named `name`
    (default: from the run, agent and size), with `annotations` on every object and pod, and
    `extra_env` added to (or replacing) the pod's variables. With `token_secret`, the agent
    demands the token that Secret holds, mounted as a file (TOKEN_FILE_VARIABLE names it):
    the token is in no variable and no spec; and serves TLS with the pair the Secret holds
    (token_secret's `tls`), its readiness then probed by TCP (the kubelet's gRPC probe speaks
    plaintext only)."""
    # A pod's hostname is JOB-INDEX: leave room for the index within DNS's 63 characters.
    name = dns_name(name or f"fwbench-{run_id}-{manifest.name}-w{world_size}", 56)
    notes = dict(annotations or {})
    labels = {
        "app.kubernetes.io/name": "fwbench-agent",
        "app.kubernetes.io/managed-by": "fwbench",
        RUN_LABEL: dns_name(run_id),
        AGENT_LABEL: dns_name(manifest.name),
        WORLD_LABEL: str(world_size),
    }
    ports = [
        {"name": "grpc", "port": manifest.grpc_port},
        {"name": "metrics", "port": manifest.metrics_port},
        {"name": "rendezvous", "port": RENDEZVOUS_PORT},
        {"name": "peer", "port": PEER_PORT},
    ]
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": notes},
        "spec": {
            "clusterIP": "None",  # headless: one DNS record per pod, JOB-INDEX.SERVICE
            "selector": {"job-name": name},
            "ports": [{"name": p["name"], "port": p["port"], "protocol": "TCP"} for p in ports],
            "publishNotReadyAddresses": True,  # ranks meet before they report ready
        },
    }
    peers = ",".join(f"{name}-{rank}.{name}:{PEER_PORT}" for rank in range(world_size))
    gpu = {"nvidia.com/gpu": str(shape.gpus)} if shape.gpus else {}
    resources = {"cpu": str(shape.cpus), "memory": shape.memory, **gpu}
    env: list[dict[str, Any]] = [
        {"name": "WORLD_SIZE", "value": str(world_size)},
        {
            "name": "RANK",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
        },
        {"name": "LOCAL_RANK", "value": "0"},  # one rank per pod
        {"name": "MASTER_ADDR", "value": f"{name}-0.{name}"},
        {"name": "MASTER_PORT", "value": str(RENDEZVOUS_PORT)},
        {"name": startup.PEERS, "value": peers},
        {"name": startup.THREADS, "value": str(shape.cpus)},
        {"name": startup.HOST, "value": startup.ANY_HOST},
        {"name": "HOME", "value": "/tmp"},  # the pod's user has no home of its own
    ]
    if world_size == 1 if alone is None else alone:  # no distributed runtime
        env = [e for e in env if e["name"] in (startup.THREADS, startup.HOST, "HOME")]
    extra = dict(extra_env or {})
    env = [e for e in env if e["name"] not in extra]
    env += [{"name": key, "value": value} for key, value in extra.items()]
    volumes, mounts = [], []
    if token_secret:  # a file, readable by the pod's group only: in no variable, no spec
        volumes.append(
            {"name": "token", "secret": {"secretName": token_secret, "defaultMode": 0o440}}
        )
        mounts.append({"name": "token", "mountPath": TOKEN_FOLDER, "readOnly": True})
        env.append({"name": TOKEN_FILE_VARIABLE, "value": f"{TOKEN_FOLDER}/{SECRET_KEY}"})
        env.append({"name": startup.TLS_CERT, "value": f"{TOKEN_FOLDER}/{CERT_KEY}"})
        env.append({"name": startup.TLS_KEY, "value": f"{TOKEN_FOLDER}/{KEY_KEY}"})
    check = "tcpSocket" if token_secret else "grpc"
    probe: dict[str, Any] = {check: {"port": manifest.grpc_port}, "periodSeconds": 5}
    container = {
        "name": "agent",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "env": env,
        "ports": [{"name": p["name"], "containerPort": p["port"]} for p in ports],
        "resources": {"requests": resources, "limits": dict(resources)},
        "readinessProbe": probe,
        "securityContext": CONTAINER_SECURITY,
        **({"volumeMounts": mounts} if mounts else {}),
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": dict(notes),
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": world_size,
            "parallelism": world_size,  # every rank at once: they wait for each other
            "backoffLimit": 0,  # a failed rank fails the world; the collector starts a new one
            "template": {
                "metadata": {
                    "labels": dict(labels),
                    "annotations": {
                        **notes,
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(manifest.metrics_port),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "subdomain": name,  # the headless Service: stable pod hostnames
                    "restartPolicy": "Never",
                    "automountServiceAccountToken": False,  # an agent never calls the API
                    "securityContext": POD_SECURITY,
                    "containers": [container],
                    **({"volumes": volumes} if volumes else {}),
                },
            },
        },
    }
    options = options or PodOptions()
    schedule(job, options)
    if not options.network_policy:
        return [service, job]
    served = {"grpc": manifest.grpc_port, "metrics": manifest.metrics_port}
    return [service, network_policy(name, namespace, labels, notes, served, options), job]


def token_secret(
    name: str,
    run_id: str,
    token: str,
    namespace: str,
    annotations: Mapping[str, str],
    tls: tuple[bytes, bytes],
) -> dict[str, Any]:
    """The Secret holding a run's agent token and the agents' TLS pair (`tls`: PEM
    certificate and key; world_objects' `token_secret`), labelled with the run like the rest,
    so that what deletes the run's objects deletes it too."""
    labels = {"app.kubernetes.io/managed-by": "fwbench", RUN_LABEL: dns_name(run_id)}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": dict(annotations),
        },
        "type": "Opaque",
        "stringData": {SECRET_KEY: token, CERT_KEY: tls[0].decode(), KEY_KEY: tls[1].decode()},
    }


def pod_monitor(run_id: str, namespace: str = "default") -> dict[str, Any]:
    """A Prometheus Operator PodMonitor scraping every agent pod of the run."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": dns_name(f"fwbench-{run_id}"), "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {RUN_LABEL: dns_name(run_id)}},
            "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "5s"}],
        },
    }


def render(
    agents: Iterable[tuple[AgentManifest, str]],
    run_id: str,
    world_sizes: Iterable[int],
    shape: PodShape,
    namespace: str = "default",
    monitor: bool = False,
    options: PodOptions | None = None,
) -> list[dict[str, Any]]:
    """Every object for these agents (manifest, image) in every world size; without world
    sizes, each agent alone (one pod, no distributed runtime), as `collector run` starts an
    agent. A world of one is a world, as `--world-sizes 1` makes it in a run: its pod is told
    WORLD_SIZE and RANK."""
    sizes = list(world_sizes)
    objects = []
    for manifest, image in agents:
        gpus = max(shape.gpus, 1) if manifest.requires_gpu else shape.gpus
        own = PodShape(shape.cpus, shape.memory, gpus)
        for size in sizes or [1]:
            objects += world_objects(
                manifest, image, run_id, size, own, namespace, alone=not sizes, options=options
            )
    return [*objects, pod_monitor(run_id, namespace)] if monitor else objects
