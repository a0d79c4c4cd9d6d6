"""Where an agent's pods may run and what may reach them (launchers/kubernetes_objects.py adds
this to every world's objects; `--k8s KEY=VALUE` and `collector k8s render --k8s` set it):

- a NetworkPolicy per world (named like its Job): the world's own pods reach each other on
  every port (rendezvous, peers), and only the agent's gRPC and metrics ports are open to
  anyone else: to `collector_cidrs` and pods labelled `app.kubernetes.io/name:
  fwbench-collector` when CIDRs are given, else to any source (an off-cluster collector's
  address is not known here; the run's token still guards gRPC). `network_policy=off` leaves
  it out (a namespace whose RBAC forbids NetworkPolicies);
- scheduling: a node selector, tolerations, image pull secrets, a `/dev/shm` of `shm` (an
  in-memory emptyDir: a container's default 64 MiB starves data loaders and NCCL), and a
  Kueue LocalQueue (`queue`), whose label makes Kueue admit the Job whole or not at all, so a
  world starts with all its ranks (gang admission)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COLLECTOR_POD_LABEL = {"app.kubernetes.io/name": "fwbench-collector"}
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True)
class PodOptions:
    """What `--k8s` says of every pod beyond its size (PodShape)."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[str, str, str], ...] = ()  # key, value ("": Exists), effect
    pull_secrets: tuple[str, ...] = ()
    shm: str = ""  # size of /dev/shm, e.g. 1Gi; "": the runtime's default
    queue: str = ""  # a Kueue LocalQueue
    collector_cidrs: tuple[str, ...] = ()
    network_policy: bool = True


def parse_pod_option(key: str, value: str) -> dict[str, Any]:
    """The PodOptions field of one `--k8s KEY=VALUE`; ValueError (one line) when malformed."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    if key == "node_selector":
        pairs = [item.partition("=") for item in items]
        if not pairs or any(not k or not sep or not v for k, sep, v in pairs):
            raise ValueError(f"--k8s node_selector={value}: expected LABEL=VALUE[,LABEL=VALUE]")
        return {key: tuple((k, v) for k, _, v in pairs)}
    if key == "tolerations":
        found = []
        for item in items:
            taint, _, effect = item.rpartition(":")
            name, _, taint_value = taint.partition("=")
            if not name or effect not in _EFFECTS:
                raise ValueError(
                    f"--k8s tolerations={value}: expected KEY[=VALUE]:EFFECT, EFFECT one of "
                    f"{', '.join(_EFFECTS)}"
                )
            found.append((name, taint_value, effect))
        return {key: tuple(found)}
    if key in ("pull_secrets", "collector_cidrs"):
        if not items:
            raise ValueError(f"--k8s {key} needs a value: {key}=A[,B]")
        return {key: tuple(items)}
    if key == "network_policy":
        if value not in ("on", "off"):
            raise ValueError(f"--k8s network_policy={value}: expected on or off")
        return {key: value == "on"}
    return {key: value}  # shm, queue


def schedule(job: dict[str, Any], options: PodOptions) -> None:
    """Adds the scheduling options to a Job and its pod template, in place."""
    spec = job["spec"]["template"]["spec"]
    if options.node_selector:
        spec["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        spec["tolerations"] = [
            {"key": key, "operator": "Equal", "value": value, "effect": effect}
            if value
            else {"key": key, "operator": "Exists", "effect": effect}
            for key, value, effect in options.tolerations
        ]
    if options.pull_secrets:
        spec["imagePullSecrets"] = [{"name": name} for name in options.pull_secrets]
    if options.shm:
        memory = {"medium": "Memory", "sizeLimit": options.shm}
        spec.setdefault("volumes", []).append({"name": "shm", "emptyDir": memory})
        for container in spec["containers"]:
            mount = {"name": "shm", "mountPath": "/dev/shm"}
            container.setdefault("volumeMounts", []).append(mount)
    if options.queue:
        job["metadata"]["labels"][QUEUE_LABEL] = options.queue


def network_policy(
    name: str,
    namespace: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str],
    ports: Mapping[str, int],
    options: PodOptions,
) -> dict[str, Any]:
    """The world's NetworkPolicy: its pods among themselves on every port; `ports` (name:
    port, the agent's gRPC and metrics) from the collector."""
    world = {"podSelector": {"matchLabels": {"job-name": name}}}
    collector: dict[str, Any] = {
        "ports": [{"protocol": "TCP", "port": port} for port in ports.values()]
    }
    if options.collector_cidrs:
        sources = [{"ipBlock": {"cidr": cidr}} for cidr in options.collector_cidrs]
        collector["from"] = [*sources, {"podSelector": {"matchLabels": COLLECTOR_POD_LABEL}}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "annotations": dict(annotations),
        },
        "spec": {
            "podSelector": {"matchLabels": {"job-name": name}},
            "policyTypes": ["Ingress"],
            "ingress": [{"from": [world]}, collector],
        },
    }
