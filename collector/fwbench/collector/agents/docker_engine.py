"""The Docker engine as the collector reaches it: a client for the daemon, and what it says of
an image. Used by the Docker launcher (agents/launchers/docker.py) and by the image builder
(images/)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import docker
import docker.errors

__all__ = ["DockerUnavailable", "ImageInfo", "docker_client"]


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


def docker_client() -> docker.DockerClient:
    """The daemon from the environment (DOCKER_HOST or the local socket)."""
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
