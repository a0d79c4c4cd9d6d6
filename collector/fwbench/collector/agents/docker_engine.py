"""The Docker engine as the collector reaches it: a client for the daemon, and what it says of
an image. Used by the Docker launcher (launchers/docker.py) and by the image builder
(images/)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

# The SDK (and requests, 0.3 s of CPU a start) only where the engine is used: `collector --help`
# and a run of local agents never import it. Modules that handle its errors name them through
# docker_errors(), which an `except` evaluates only when something was raised.
if TYPE_CHECKING:
    import docker

__all__ = ["DockerUnavailable", "ImageInfo", "docker_client", "docker_errors"]


def docker_errors() -> ModuleType:
    """docker.errors, imported on first use."""
    import docker.errors

    return docker.errors


class DockerUnavailable(RuntimeError):
    """No Docker daemon answers."""


@dataclass(frozen=True)
class ImageInfo:
    tag: str
    id: str  # sha256:... of the image config
    digest: str  # registry digest (name@sha256:...), "" for a locally built image
    labels: dict[str, str]
    size_bytes: int

    @classmethod
    def of(cls, image: Any, tag: str = "") -> ImageInfo:
        attrs = image.attrs
        return cls(
            tag=tag or (image.tags[0] if image.tags else ""),
            id=image.id,
            digest=(attrs.get("RepoDigests") or [""])[0],
            labels=dict(attrs["Config"].get("Labels") or {}),
            size_bytes=int(attrs.get("Size", 0)),
        )


def _unreachable_socket() -> str:
    """Why the daemon's Unix socket cannot be reached ("" when it can, or the host is not a
    Unix socket): docker-py, asked to reach a socket file that does not exist or that no
    daemon listens on (a stale file a killed dockerd left), leaves its socket unclosed as it
    raises; a probe of our own closes its socket either way."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return ""
    path = host.removeprefix("unix://")
    if not Path(path).exists():
        return f"no socket at {path}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(path)
        except OSError as error:
            return f"the socket at {path} does not answer: {error.strerror or error}"
    return ""


def docker_client() -> docker.DockerClient:
    """The daemon from the environment (DOCKER_HOST or the local socket)."""
    unreachable = _unreachable_socket()
    if unreachable:
        raise DockerUnavailable(
            f"no Docker daemon answers ({unreachable}); start one (`make docker-deps` "
            "installs and starts Debian's docker.io when none runs)"
        )
    import docker
    import docker.errors

    client = None
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as error:
        if client is not None:
            client.close()
        raise DockerUnavailable(
            f"no Docker daemon answers ({error}); start one (`make docker-deps` installs and "
            "starts Debian's docker.io when none runs)"
        ) from None
    return client
