"""The Kubernetes API as the Kubernetes launcher (launchers/kubernetes.py) uses it, through the
official `kubernetes` client, imported only when a cluster is asked for so that the collector's
other commands run without it: the cluster the client's own configuration names (KUBECONFIG or
~/.kube/config, else the pod's service account), objects created and deleted in one namespace,
pods watched until they run or Kubernetes says why they cannot, and what collectors that are
gone left behind (their collector annotation, HOST:PID, names a process that no longer exists)."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.launchers.base import log_tail, process_exists
from fwbench.collector.launchers.kubernetes_objects import INDEX_ANNOTATION, RUN_LABEL

COLLECTOR_ANNOTATION = "fwbench.io/collector"  # HOST:PID of the collector that made the object
MANAGED = "app.kubernetes.io/managed-by=fwbench"
# Container states from which a pod never runs without someone changing its spec or registry:
# the start is refused at once with Kubernetes' reason rather than at the start timeout.
HOPELESS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
        "CrashLoopBackOff",
    }
)
WATCH_SECONDS = 5  # each watch request's length; between them, the launcher's end is checked
DELETE_WAIT_SECONDS = 30.0


class Cluster:
    """One namespace of the cluster the client's configuration points at."""

    def __init__(self, namespace: str) -> None:
        try:
            from kubernetes import client, config
        except ImportError:
            raise AgentUnavailable(
                "--launcher kubernetes needs the `kubernetes` Python client: pip install "
                "'fwbench[kubernetes]'"
            ) from None
        try:
            config.load_kube_config()
        except Exception as error:  # noqa: BLE001 (no kubeconfig: perhaps a pod of the cluster)
            try:
                config.load_incluster_config()
            except config.ConfigException:
                raise AgentUnavailable(
                    f"no Kubernetes cluster configured: no usable kubeconfig (KUBECONFIG or "
                    f"~/.kube/config: {error}) and not in a pod (no service account)"
                ) from None
        api = client.ApiClient()
        self.core = client.CoreV1Api(api)
        self.batch = client.BatchV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.namespace = namespace
        self.host = str(api.configuration.host)

    def create(self, objects: list[dict[str, Any]]) -> None:
        """Secrets, Services, NetworkPolicies and Jobs, in order; raises AgentUnavailable with
        the API server's reason."""
        for obj in objects:
            create = {
                "Secret": self.core.create_namespaced_secret,
                "Service": self.core.create_namespaced_service,
                "NetworkPolicy": self.networking.create_namespaced_network_policy,
                "Job": self.batch.create_namespaced_job,
            }[obj["kind"]]
            try:
                create(self.namespace, obj)
            except Exception as error:  # noqa: BLE001 (ApiException, or the API unreachable)
                name = f"{obj['kind']} {self.namespace}/{obj['metadata']['name']}"
                raise AgentUnavailable(f"Kubernetes refused {name}: {_why(error)}") from None

    def pod(self, name: str) -> Any:
        """The pod (V1Pod), or None once it is gone or the API cannot be reached."""
        try:
            return self.core.read_namespaced_pod(name, self.namespace)
        except Exception:  # noqa: BLE001 (404, or the API unreachable)
            return None

    def log_tail(self, name: str) -> str:
        """base.log_tail of the pod's container's last lines, or "" when it has none."""
        try:
            text = self.core.read_namespaced_pod_log(name, self.namespace, tail_lines=20)
        except Exception:  # noqa: BLE001 (no log yet, the pod gone, the API unreachable)
            return ""
        return log_tail(str(text or ""))

    def save_log(self, name: str, path: Path) -> None:
        """Appends the pod's whole log to `path` (the run folder keeps it: the pod and its log
        go with the Job), or a line saying why it could not be read."""
        try:
            text = str(self.core.read_namespaced_pod_log(name, self.namespace) or "")
        except Exception as error:  # noqa: BLE001 (the pod gone, the API unreachable)
            text = f"[fwbench: the log of pod {self.namespace}/{name} could not be read: "
            text += f"{_why(error)}]\n"
        try:
            with path.open("a", encoding="utf-8", errors="replace") as log:
                log.write(f"--- pod {self.namespace}/{name}\n{text}")
                log.write("" if text.endswith("\n") or not text else "\n")
        except OSError:
            pass  # a full disk: the run's results matter more than an agent's log

    def wait_for_pod(self, job: str, index: int, deadline: float, ended: Callable[[], bool]) -> Any:
        """Rank `index`'s pod of `job` once it runs with an IP; raises AgentUnavailable with
        Kubernetes' reason when it fails, cannot run, or is not running by `deadline`."""
        why = "no pod created yet"
        while not ended() and time.monotonic() < deadline:
            try:
                for kind, pod in self._pod_events(f"job-name={job}", deadline):
                    annotations = pod.metadata.annotations or {}
                    if annotations.get(INDEX_ANNOTATION, "0") != str(index):
                        continue
                    ready, failed, why = pod_state(pod)
                    if kind == "DELETED":
                        raise AgentUnavailable(f"pod {pod.metadata.name} was deleted: {why}")
                    if failed:
                        tail = self.log_tail(pod.metadata.name)
                        raise AgentUnavailable(f"pod {pod.metadata.name} failed: {why}{tail}")
                    if ready:
                        return pod
                    if ended() or time.monotonic() > deadline:
                        break
            except AgentUnavailable:
                raise
            except Exception as error:  # noqa: BLE001 (ApiException, or the API unreachable)
                if getattr(error, "status", None) != 410:  # 410 Gone: list afresh
                    raise AgentUnavailable(f"the Kubernetes API failed: {_why(error)}") from None
        what = "the run is ending" if ended() else "not running by the start timeout"
        raise AgentUnavailable(f"{what}; Kubernetes says: {why}")

    def _pod_events(self, selector: str, deadline: float) -> Iterator[tuple[str, Any]]:
        """The pods now (LISTED), then what happens to them (ADDED, MODIFIED, DELETED) for a
        few seconds at most, so that the caller checks the time and the run's end between."""
        from kubernetes import watch

        listed = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        yield from (("LISTED", pod) for pod in listed.items)
        for event in watch.Watch().stream(
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=selector,
            resource_version=listed.metadata.resource_version,
            timeout_seconds=max(1, int(min(deadline - time.monotonic(), WATCH_SECONDS))),
        ):
            yield event["type"], event["object"]

    def delete_job(self, job: str, grace_seconds: float = 10.0) -> None:
        """The Job, its pods, its Service and NetworkPolicy (same name); waits until the pods
        are gone."""
        from kubernetes.client import V1DeleteOptions

        options = V1DeleteOptions(
            propagation_policy="Background", grace_period_seconds=int(grace_seconds)
        )
        for delete in (
            self.batch.delete_namespaced_job,
            self.core.delete_namespaced_service,
            self.networking.delete_namespaced_network_policy,
        ):
            _quietly(delete, job, self.namespace, body=options)
        selector = f"job-name={job}"
        deadline = time.monotonic() + grace_seconds + DELETE_WAIT_SECONDS
        while time.monotonic() < deadline:
            try:
                pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
            except Exception:  # noqa: BLE001 (the API unreachable: nothing more to do)
                return
            if not pods.items:
                return
            for pod in pods.items:  # the Job's controller may be slower than us
                _quietly(
                    self.core.delete_namespaced_pod, pod.metadata.name, self.namespace, body=options
                )
            time.sleep(0.5)

    def jobs(self, selector: str, strict: bool = False) -> list[Any]:
        """The namespace's Jobs with these labels; none when the API cannot be reached, or,
        `strict`, AgentUnavailable saying so."""
        try:
            listed = self.batch.list_namespaced_job(self.namespace, label_selector=selector)
        except Exception as error:  # noqa: BLE001 (ApiException, or the API unreachable)
            if strict:
                raise AgentUnavailable(
                    f"the Kubernetes API at {self.host} answered no list of Jobs in namespace "
                    f"{self.namespace}: {_why(error)}"
                ) from None
            return []
        return list(listed.items)

    def delete_run(self, run_label: str) -> None:
        """Every Job, Service, NetworkPolicy, pod and Secret labelled with the run."""
        selector = f"{RUN_LABEL}={run_label}"
        for job in self.jobs(selector):
            self.delete_job(job.metadata.name, grace_seconds=2.0)
        for listing, delete in (
            (self.core.list_namespaced_service, self.core.delete_namespaced_service),
            (
                self.networking.list_namespaced_network_policy,
                self.networking.delete_namespaced_network_policy,
            ),
            (self.core.list_namespaced_pod, self.core.delete_namespaced_pod),
            (self.core.list_namespaced_secret, self.core.delete_namespaced_secret),
        ):
            try:
                left = listing(self.namespace, label_selector=selector).items
            except Exception:  # noqa: BLE001
                left = []
            for obj in left:
                _quietly(delete, obj.metadata.name, self.namespace)

    def delete_orphans(self) -> None:
        """Deletes the Jobs (and their pods and Services) and the Secrets that collectors of this
        host made and that outlived them; the first call to the API, so AgentUnavailable when it
        cannot be reached or refuses."""
        for job in self.jobs(MANAGED, strict=True):
            if _orphaned(job):
                self.delete_job(job.metadata.name, grace_seconds=2.0)
        try:  # the runs' token Secrets
            secrets = self.core.list_namespaced_secret(self.namespace, label_selector=MANAGED)
        except Exception:  # noqa: BLE001 (no right to list Secrets: the run's start says so)
            return
        for secret in secrets.items:
            if _orphaned(secret):
                _quietly(self.core.delete_namespaced_secret, secret.metadata.name, self.namespace)


def _orphaned(obj: Any) -> bool:
    """Whether a collector of this host made `obj` (its annotation) and is gone."""
    host, _, pid = (obj.metadata.annotations or {}).get(COLLECTOR_ANNOTATION, "").rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not process_exists(int(pid))


def pod_state(pod: Any) -> tuple[bool, bool, str]:
    """(running with an IP, failed for good, Kubernetes' reason in its own words)."""
    status = pod.status
    phase = (status.phase if status else None) or "Pending"
    for container in (status.container_statuses or []) if status else []:
        state = container.state
        if state and state.waiting and state.waiting.reason:
            why = f"{state.waiting.reason}: {state.waiting.message or ''}".rstrip(": ")
            return False, state.waiting.reason in HOPELESS, why
        if state and state.terminated:
            ended = state.terminated
            why = f"{ended.reason or 'terminated'} (exit code {ended.exit_code})"
            return False, True, f"{why}: {ended.message}" if ended.message else why
    if phase in ("Failed", "Succeeded"):
        return False, True, f"{phase}: {status.reason or ''} {status.message or ''}".strip()
    if phase == "Running" and status.pod_ip:
        return True, False, "Running"
    for condition in (status.conditions or []) if status else []:
        if condition.type == "PodScheduled" and condition.status == "False":
            return False, False, f"{condition.reason}: {condition.message}"
    return False, False, phase


def _why(error: Exception) -> str:
    """An ApiException's Status message (409 AlreadyExists, 403 Forbidden, ...)."""
    body = getattr(error, "body", None)
    if body:
        try:
            status = json.loads(body)
            return f"{status.get('reason', '')}: {status.get('message', '')}".strip(": ")
        except ValueError:
            pass
    reason = getattr(error, "reason", None)  # urllib3's MaxRetryError: the connection's error
    text = str(reason or error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _quietly(delete: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """A delete that may find the object already gone (404) or the API unreachable."""
    with contextlib.suppress(Exception):
        delete(*args, **kwargs)
