"""A fake Kubernetes API server with a fake kubelet, for the Kubernetes launcher's tests: a real
HTTP server on 127.0.0.1 that the official `kubernetes` client talks to (no mock object).

The API: create, get, list and delete v1 Services, Pods and Secrets, batch/v1 Jobs and
networking.k8s.io/v1 NetworkPolicies (kept, not enforced) in any namespace (a Secret's
stringData kept as base64 data, as the API server does),
equality label selectors (a=b, a!=b, a), `?watch=true` streams (one JSON event per line,
ADDED/MODIFIED/DELETED, from a resourceVersion or from the current state, until
timeoutSeconds), 404/409 Status bodies.

The kubelet: each Job gets its pods at once (JOB-INDEX-xxxxx, the completion-index annotation
and label, job-name labels, nodeName fake-node-1, each its own loopback address 127.0.0.N as
its pod IP), and each pod's container RUNS as a local process: the test maps each image to an
argv and the image's environment; the container's env is resolved (value, fieldRef to
metadata.annotations[...], metadata.name, status.podIP, spec.nodeName, secretKeyRef: a missing
Secret or key leaves the container waiting, CreateContainerConfigError; a Secret volume is a
folder of this host holding its keys as files, and values naming a path under its mountPath
name that folder instead: a mount namespace), FWBENCH_HOST becomes
the pod IP (a pod has its own network namespace: a loopback address stands in for it), and
pod hostnames JOB-INDEX.SUBDOMAIN in values become their IPs (a fake DNS). Phases: Pending,
Running (with podIP) once the process starts, Succeeded/Failed when it exits; its output is the
pod's log (GET .../pods/NAME/log). An image that is
not in the map leaves the pod Pending with ErrImagePull, and one asking for more CPUs than the
node has leaves it Pending, Unschedulable. Deleting a pod (or its Job) ends its
process: SIGTERM, SIGKILL after the grace period."""

from __future__ import annotations

import base64
import copy
import itertools
import json
import os
import re
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

INDEX = "batch.kubernetes.io/job-completion-index"
NODE = "fake-node-1"
NODE_CPUS = 64  # a pod asking for more is never scheduled (Unschedulable)
_PATH = re.compile(
    r"^/(?:api/v1|apis/batch/v1|apis/networking.k8s.io/v1)/namespaces/(?P<ns>[^/]+)/"
    r"(?P<kind>services|pods|jobs|secrets|networkpolicies)(?:/(?P<name>[^/]+)(?P<log>/log)?)?$"
)
_KINDS = {
    "services": ("Service", "v1"),
    "pods": ("Pod", "v1"),
    "jobs": ("Job", "batch/v1"),
    "secrets": ("Secret", "v1"),
    "networkpolicies": ("NetworkPolicy", "networking.k8s.io/v1"),
}


@dataclass
class Image:
    """What a container of this image runs: argv and the image's own environment."""

    argv: list[str]
    env: Mapping[str, str] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def matches(labels: Mapping[str, str], selector: str) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


class FakeKube:
    """The API objects, their event log, and the pods' processes."""

    def __init__(self, images: Mapping[str, Image], logs: Path) -> None:
        self.images = dict(images)
        self.logs = logs
        self.lock = threading.Condition()
        self.rv = 0
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.events: list[tuple[int, str, str, dict[str, Any]]] = []  # rv, kind, type, object
        self.processes: dict[tuple[str, str], subprocess.Popen[bytes]] = {}
        self.addresses = itertools.count(2)  # 127.0.0.2, 127.0.0.3, ...
        self.requests: list[str] = []  # METHOD PATH, for the tests' curiosity
        self.environments: dict[str, dict[str, str]] = {}  # pod name -> its process's env
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # The object store ------------------------------------------------------------------
    def _record(self, kind: str, kind_of_event: str, obj: dict[str, Any]) -> None:
        """Under the lock: a new resourceVersion for obj and an event for the watchers."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        self.events.append((self.rv, kind, kind_of_event, copy.deepcopy(obj)))
        self.lock.notify_all()

    def create(self, kind: str, namespace: str, obj: dict[str, Any]) -> tuple[int, Any]:
        meta = obj.setdefault("metadata", {})
        name = meta.get("name", "")
        with self.lock:
            if (kind, namespace, name) in self.objects:
                return 409, _status(409, "AlreadyExists", f'{kind} "{name}" already exists')
            meta.update(namespace=namespace, uid=secrets.token_hex(8), creationTimestamp=_now())
            obj["kind"], obj["apiVersion"] = _KINDS[kind]
            if kind == "secrets":  # the API server keeps stringData as base64 data
                data = obj.setdefault("data", {})
                for key, value in obj.pop("stringData", {}).items():
                    data[key] = base64.b64encode(value.encode()).decode()
            self.objects[(kind, namespace, name)] = obj
            self._record(kind, "ADDED", obj)
        if kind == "jobs":
            self._start_job(namespace, obj)
        return 201, obj

    def update(self, kind: str, namespace: str, name: str, change: Any) -> None:
        with self.lock:
            obj = self.objects.get((kind, namespace, name))
            if obj is not None:
                change(obj)
                self._record(kind, "MODIFIED", obj)

    def listed(self, kind: str, namespace: str, selector: str) -> list[dict[str, Any]]:
        with self.lock:
            return [
                copy.deepcopy(obj)
                for (k, ns, _), obj in self.objects.items()
                if k == kind
                and ns == namespace
                and matches(obj["metadata"].get("labels") or {}, selector)
            ]

    def delete(self, kind: str, namespace: str, name: str, propagation: str) -> tuple[int, Any]:
        with self.lock:
            obj = self.objects.pop((kind, namespace, name), None)
            if obj is None:
                return 404, _status(404, "NotFound", f'{kind} "{name}" not found')
            self._record(kind, "DELETED", obj)
        if kind == "pods":
            self._end_process(namespace, name)
        if kind == "jobs" and propagation != "Orphan":
            for pod in self.listed("pods", namespace, f"job-name={name}"):
                self.delete("pods", namespace, pod["metadata"]["name"], "")
        if kind == "jobs":
            return 200, {**_status(200, "", ""), "status": "Success"}
        return 200, obj

    def created(self, kind: str) -> list[dict[str, Any]]:
        """Every object of `kind` as it was created."""
        with self.lock:
            return [obj for _, k, event, obj in self.events if k == kind and event == "ADDED"]

    def left(self) -> list[str]:
        """KIND/NAME of every object still in the store."""
        with self.lock:
            return [f"{kind}/{name}" for kind, _, name in self.objects]

    def running(self) -> list[int]:
        """Pids of pod processes still running."""
        with self.lock:
            return [p.pid for p in self.processes.values() if p.poll() is None]

    # The kubelet -----------------------------------------------------------------------
    def _start_job(self, namespace: str, job: dict[str, Any]) -> None:
        name = job["metadata"]["name"]
        template = job["spec"]["template"]
        size = int(job["spec"].get("parallelism") or job["spec"].get("completions") or 1)
        subdomain = template["spec"].get("subdomain", "")
        ips = [f"127.0.0.{next(self.addresses)}" for _ in range(size)]
        dns = {f"{name}-{index}.{subdomain}": ip for index, ip in enumerate(ips)}
        for index, ip in enumerate(ips):
            pod = copy.deepcopy(template)
            meta = pod.setdefault("metadata", {})
            meta["name"] = f"{name}-{index}-{secrets.token_hex(3)[:5]}"
            meta["labels"] = {
                **meta.get("labels", {}),
                "job-name": name,
                "batch.kubernetes.io/job-name": name,
                INDEX: str(index),
            }
            meta["annotations"] = {**meta.get("annotations", {}), INDEX: str(index)}
            pod["spec"].update(nodeName=NODE, hostname=f"{name}-{index}")
            pod["status"] = {
                "phase": "Pending",
                "hostIP": "127.0.0.1",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
            }
            self.create("pods", namespace, pod)
            threading.Thread(
                target=self._run_pod, args=(namespace, pod, ip, dns), daemon=True
            ).start()

    def _mount_secrets(
        self, namespace: str, pod: dict[str, Any], container: dict[str, Any]
    ) -> dict[str, str] | None:
        """The container's Secret volumes as folders of this host, each key a file with the
        volume's defaultMode: {mountPath: folder}; None (the container left waiting,
        CreateContainerConfigError) when a Secret is missing."""
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        mounts = {}
        for mount in container.get("volumeMounts", []):
            secret = volumes[mount["name"]].get("secret")
            if secret is None:
                continue
            with self.lock:
                found = self.objects.get(("secrets", namespace, secret["secretName"]))
            if found is None:
                self._wait(
                    namespace,
                    pod["metadata"]["name"],
                    container,
                    "CreateContainerConfigError",
                    f'secret "{secret["secretName"]}" not found',
                )
                return None
            folder = self.logs / "volumes" / pod["metadata"]["name"] / mount["name"]
            folder.mkdir(parents=True)
            for key, value in found.get("data", {}).items():
                (folder / key).write_bytes(base64.b64decode(value))
                (folder / key).chmod(secret.get("defaultMode", 0o644))
            mounts[mount["mountPath"]] = str(folder)
        return mounts

    def _run_pod(self, namespace: str, pod: dict[str, Any], ip: str, dns: dict[str, str]) -> None:
        name = pod["metadata"]["name"]
        (container,) = pod["spec"]["containers"]
        image = self.images.get(container["image"])
        cpus = container.get("resources", {}).get("requests", {}).get("cpu", "0")
        if int(cpus) > NODE_CPUS:
            unschedulable = {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
            self.update(
                "pods", namespace, name, lambda p: p["status"].update(conditions=[unschedulable])
            )
            return
        if image is None:
            message = f'failed to pull and unpack image "{container["image"]}": not found'
            self._wait(namespace, name, container, "ErrImagePull", message)
            return
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **image.env}
        for variable in container.get("env", []):
            secret = variable.get("valueFrom", {}).get("secretKeyRef")
            if secret is not None:
                with self.lock:
                    found = self.objects.get(("secrets", namespace, secret["name"]), {})
                value = found.get("data", {}).get(secret["key"])
                if value is None:  # as a kubelet: the container cannot be made
                    self._wait(
                        namespace,
                        name,
                        container,
                        "CreateContainerConfigError",
                        f'secret "{secret["name"]}" not found',
                    )
                    return
                env[variable["name"]] = base64.b64decode(value).decode()
                continue
            env[variable["name"]] = self._value(variable, pod, ip, dns)
        env["FWBENCH_HOST"] = ip
        mounts = self._mount_secrets(namespace, pod, container)
        if mounts is None:
            return
        for key, value in env.items():  # the container's view of its mounts, on this host
            for inside, outside in mounts.items():
                if value == inside or value.startswith(inside.rstrip("/") + "/"):
                    env[key] = outside + value[len(inside.rstrip("/")) :]
        self.environments[name] = env
        log = (self.logs / f"{name}.log").open("ab")
        with self.lock:
            if ("pods", namespace, name) not in self.objects:
                return  # deleted before it started
            process = subprocess.Popen(
                image.argv,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            self.processes[(namespace, name)] = process

        def running(p: dict[str, Any]) -> None:
            p["status"].update(
                phase="Running",
                podIP=ip,
                podIPs=[{"ip": ip}],
                startTime=_now(),
                containerStatuses=[self._container(container, {"running": {"startedAt": _now()}})],
            )

        self.update("pods", namespace, name, running)
        code = process.wait()
        log.close()

        def ended(p: dict[str, Any]) -> None:
            state = {
                "terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
            }
            p["status"].update(
                phase="Succeeded" if code == 0 else "Failed",
                containerStatuses=[self._container(container, state)],
            )

        self.update("pods", namespace, name, ended)

    def _wait(
        self, namespace: str, name: str, container: dict[str, Any], reason: str, message: str
    ) -> None:
        """The pod stays Pending, its container waiting for `reason`."""
        state = {"waiting": {"reason": reason, "message": message}}
        self.update(
            "pods",
            namespace,
            name,
            lambda p: p["status"].update(containerStatuses=[self._container(container, state)]),
        )

    @staticmethod
    def _container(container: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": container["name"],
            "ready": "running" in state,
            "restartCount": 0,
            "image": container["image"],
            "imageID": "",
            "state": state,
        }

    @staticmethod
    def _value(variable: dict[str, Any], pod: dict[str, Any], ip: str, dns: dict[str, str]) -> str:
        if "value" in variable:
            value = str(variable["value"])
            for host, address in dns.items():
                value = value.replace(host, address)
            return value
        path = variable["valueFrom"]["fieldRef"]["fieldPath"]
        annotation = re.fullmatch(r"metadata\.annotations\['(.+)'\]", path)
        if annotation:
            return str(pod["metadata"].get("annotations", {}).get(annotation.group(1), ""))
        return {
            "status.podIP": ip,
            "metadata.name": pod["metadata"]["name"],
            "spec.nodeName": NODE,
        }[path]

    def _end_process(self, namespace: str, name: str, grace: float = 5.0) -> None:
        with self.lock:
            process = self.processes.get((namespace, name))
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.lock:
            processes = list(self.processes.values())
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()

    # Watches ---------------------------------------------------------------------------
    def watch(
        self, handler: BaseHTTPRequestHandler, kind: str, namespace: str, query: dict[str, str]
    ) -> None:
        selector = query.get("labelSelector", "")
        until = time.monotonic() + float(query.get("timeoutSeconds") or 60)
        since = int(query.get("resourceVersion") or 0)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()

        def send(kind_of_event: str, obj: dict[str, Any]) -> None:
            line = json.dumps({"type": kind_of_event, "object": obj}) + "\n"
            handler.wfile.write(line.encode())
            handler.wfile.flush()

        with self.lock:
            if not since:  # from the current state: every object as ADDED
                since = self.rv
                initial = self.listed(kind, namespace, selector)
            else:
                initial = []
        try:
            for obj in initial:
                send("ADDED", obj)
            while time.monotonic() < until:
                with self.lock:
                    self.lock.wait_for(lambda seen=since: self.rv > seen, until - time.monotonic())
                    fresh = [e for e in self.events if e[0] > since]
                    since = self.rv
                for _, k, kind_of_event, obj in fresh:
                    if (
                        k == kind
                        and obj["metadata"].get("namespace") == namespace
                        and matches(obj["metadata"].get("labels") or {}, selector)
                    ):
                        send(kind_of_event, obj)
        except (BrokenPipeError, ConnectionResetError):
            pass


def _handler(kube: FakeKube) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the connection closes after each response

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _reply(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _route(self) -> tuple[str, str, str | None, dict[str, str]] | None:
            url = urlparse(self.path)
            kube.requests.append(f"{self.command} {url.path}")
            found = _PATH.match(url.path)
            query = {key: values[-1] for key, values in parse_qs(url.query).items()}
            if found is None:
                self._reply(404, _status(404, "NotFound", f"no route {url.path}"))
                return None
            if found["log"]:  # a pod's log: its process's output
                log = kube.logs / f"{found['name']}.log"
                text = log.read_bytes() if log.exists() else b""
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)
                return None
            return found["kind"], found["ns"], found["name"], query

        def _body(self) -> dict[str, Any]:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}") if length else {}

        def do_GET(self) -> None:
            route = self._route()
            if route is None:
                return
            kind, namespace, name, query = route
            if name:
                with kube.lock:
                    obj = copy.deepcopy(kube.objects.get((kind, namespace, name)))
                if obj is None:
                    self._reply(404, _status(404, "NotFound", f'{kind} "{name}" not found'))
                else:
                    self._reply(200, obj)
            elif query.get("watch") in ("true", "1"):
                kube.watch(self, kind, namespace, query)
            else:
                with kube.lock:
                    items = kube.listed(kind, namespace, query.get("labelSelector", ""))
                    version = str(kube.rv)
                kind_name, api = _KINDS[kind]
                self._reply(
                    200,
                    {
                        "kind": f"{kind_name}List",
                        "apiVersion": api,
                        "metadata": {"resourceVersion": version},
                        "items": items,
                    },
                )

        def do_POST(self) -> None:
            route = self._route()
            if route is not None:
                kind, namespace, _, _ = route
                self._reply(*kube.create(kind, namespace, self._body()))

        def do_DELETE(self) -> None:
            route = self._route()
            if route is None:
                return
            kind, namespace, name, query = route
            policy = self._body().get("propagationPolicy") or query.get("propagationPolicy", "")
            self._reply(*kube.delete(kind, namespace, name or "", policy))

    return Handler


def kubeconfig(url: str, path: Path) -> Path:
    """A kubeconfig whose current context is the fake server, namespace default."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": url}}],
        "users": [{"name": "fake", "user": {"token": "fake"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
        "current-context": "fake",
    }
    path.write_text(json.dumps(config))
    return path
