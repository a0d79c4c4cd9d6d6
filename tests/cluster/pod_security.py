"""The "restricted" Pod Security Standard (Kubernetes' docs, "Pod Security Standards", the
baseline and restricted profiles), as a check of a pod spec: what `kubectl label ns
pod-security.kubernetes.io/enforce=restricted` makes the API server refuse. Offline, for the
objects `collector k8s render` prints and `--launcher kubernetes` creates."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}


def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of an object that makes pods: a Pod, or a workload's template."""
    kind, name = obj.get("kind"), obj.get("metadata", {}).get("name")
    if kind == "Pod":
        yield f"Pod/{name}", obj["spec"]
    elif kind in ("Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        yield f"{kind}/{name}", obj["spec"]["template"]["spec"]
    elif kind == "CronJob":
        yield f"{kind}/{name}", obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def violations(spec: dict[str, Any]) -> list[str]:
    """What in the pod spec the restricted profile forbids, a line each; [] when it passes."""
    found = []
    pod = spec.get("securityContext") or {}
    containers = [*spec.get("initContainers", []), *spec.get("containers", [])]
    containers += spec.get("ephemeralContainers", [])
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(key):
            found.append(f"{key}: true")
    for volume in spec.get("volumes", []):
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume['name']}: {', '.join(sorted(kinds))} not allowed")
    for sysctl in pod.get("sysctls", []):
        if sysctl["name"] not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl['name']}")
    if (pod.get("seLinuxOptions") or {}).get("user") or (pod.get("seLinuxOptions") or {}).get(
        "role"
    ):
        found.append("seLinuxOptions user or role set")
    pod_non_root = pod.get("runAsNonRoot") is True
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type")
    if pod.get("runAsUser") == 0:
        found.append("pod runAsUser: 0")
    if pod_seccomp not in (None, "RuntimeDefault", "Localhost"):
        found.append(f"pod seccompProfile {pod_seccomp}")
    for container in containers:
        name = container.get("name", "?")
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"{name}: privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation is not false")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in capabilities.get("drop", []):
            found.append(f"{name}: capabilities do not drop ALL")
        added = set(capabilities.get("add", []))
        if added - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: adds capabilities {sorted(added - {'NET_BIND_SERVICE'})}")
        if added - BASELINE_CAPABILITIES:
            found.append(f"{name}: adds capabilities beyond baseline")
        if context.get("runAsNonRoot") is False or (
            context.get("runAsNonRoot") is None and not pod_non_root
        ):
            found.append(f"{name}: runAsNonRoot is not true (pod or container)")
        if context.get("runAsUser") == 0:
            found.append(f"{name}: runAsUser: 0")
        seccomp = (context.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: no RuntimeDefault or Localhost seccomp profile")
        if context.get("procMount") not in (None, "Default"):
            found.append(f"{name}: procMount {context['procMount']}")
        if any(port.get("hostPort") for port in container.get("ports", [])):
            found.append(f"{name}: hostPort")
    return found


def check_restricted(objects: list[dict[str, Any]]) -> list[str]:
    """Every violation in every pod-making object, each prefixed by where it is; also a
    pod that mounts its service account's token (not in the profile, but nothing here
    needs the API)."""
    found = []
    for obj in objects:
        for where, spec in pod_specs(obj):
            found += [f"{where}: {line}" for line in violations(spec)]
            if spec.get("automountServiceAccountToken") is not False:
                found.append(f"{where}: the service-account token is mounted")
    return found
