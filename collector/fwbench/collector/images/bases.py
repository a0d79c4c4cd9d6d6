"""The base an agent's image is built on: $FWBENCH_BASE_IMAGE, else the Dockerfile's default
(images/dockerfile.py), pulled when it is not here; where it cannot be pulled (a host without
a registry), the local Debian base `collector images base` makes, for CPU agents.

Only a build looks for its base in a registry (found_base): a command whose images are current
pulls nothing and says nothing of bases (present_base is what is here, never pulled). It used
to try the pull, and say it could not, on every command of a host without a registry."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fwbench.collector.agents.docker_engine import ImageInfo, docker_errors
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.images.dockerfile import base_image
from fwbench.collector.images.errors import ImageBuildError
from fwbench.collector.images.local_base import LOCAL_BASE_IMAGE
from fwbench.spec import settings

if TYPE_CHECKING:
    import docker

BASE_IMAGE_VARIABLE = settings.BASE_IMAGE
Base = tuple[str, str]  # (the reference to build on, its image id)

# What each collector command found of its bases, per Docker client (one a command): {(the base
# asked for, for a GPU agent?): the base to build on, or why there is none}. Agents start
# again each --repeat round: asking again would inspect the base each time, and try again to
# pull one that cannot be pulled (no registry) each time. _HERE: what present_base found.
_BASES: weakref.WeakKeyDictionary[Any, dict[tuple[str, bool], Base | ImageBuildError]]
_BASES = weakref.WeakKeyDictionary()
_HERE: weakref.WeakKeyDictionary[Any, dict[tuple[str, bool], Base | None]]
_HERE = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def find_image(client: docker.DockerClient, tag: str) -> ImageInfo | None:
    try:
        return ImageInfo.of(client.images.get(tag), tag)
    except docker_errors().ImageNotFound:
        return None


def resolve_base(
    client: docker.DockerClient, manifest: AgentManifest, report: Callable[[str], None]
) -> str:
    """The base to build on (found_base's reference)."""
    return found_base(client, manifest, report)[0]


def found_base(
    client: docker.DockerClient, manifest: AgentManifest, report: Callable[[str], None]
) -> Base:
    """The base to build on, pulled when missing (said through `report`); where it cannot be
    pulled, the local Debian base when there is one (said too). Looked for once per client
    (and so per collector command): later calls get the same answer. Raises ImageBuildError."""
    asked = _asked(manifest)
    with _LOCK:  # agents starting side by side on one base: one pull, not one each
        known = _BASES.setdefault(client, {})
        if asked not in known:
            try:
                known[asked] = _pulled(client, *asked, report)
            except ImageBuildError as error:
                known[asked] = error
        found = known[asked]
    if isinstance(found, ImageBuildError):
        raise ImageBuildError(str(found))
    return found


def present_base(client: docker.DockerClient, manifest: AgentManifest) -> Base | None:
    """The base an image would be built on now, without pulling anything: what found_base
    found already, else the base asked for if it is here, else (a CPU agent) the local Debian
    base if it is here; None when none is. Looked for once per client, and says nothing."""
    asked = _asked(manifest)
    with _LOCK:
        known = _BASES.get(client, {}).get(asked)
        if known is not None:
            return None if isinstance(known, ImageBuildError) else known
        here = _HERE.setdefault(client, {})
        if asked not in here:
            found = find_image(client, asked[0])
            local = None if found or asked[1] else find_image(client, LOCAL_BASE_IMAGE)
            here[asked] = _pinned(found, asked[0]) if found else None
            if local is not None:
                here[asked] = LOCAL_BASE_IMAGE, local.id
        return here[asked]


def _asked(manifest: AgentManifest) -> tuple[str, bool]:
    return os.environ.get(BASE_IMAGE_VARIABLE) or base_image(manifest), manifest.requires_gpu


def _pinned(found: ImageInfo, wanted: str) -> Base:
    # By registry digest where it came from a registry: the build uses what was checked.
    return found.digest or wanted, found.id


def _pulled(
    client: docker.DockerClient, wanted: str, gpu: bool, report: Callable[[str], None]
) -> Base:
    found = find_image(client, wanted)
    if found is not None:
        return _pinned(found, wanted)
    try:
        report(f"pulling the base image {wanted}")
        client.images.pull(wanted)
        found = find_image(client, wanted)
    except docker_errors().DockerException as error:
        local = None if gpu else find_image(client, LOCAL_BASE_IMAGE)
        if local is None:
            raise ImageBuildError(
                f"base image {wanted} is not here and cannot be pulled ({error}); on a "
                f"host without a registry make one with `collector images base` and set "
                f"{BASE_IMAGE_VARIABLE}={LOCAL_BASE_IMAGE}"
            ) from None
        report(
            f"no registry gives {wanted} here: building on the local base {LOCAL_BASE_IMAGE} "
            "(`collector images base`) instead"
        )
        return LOCAL_BASE_IMAGE, local.id
    return _pinned(found, wanted) if found else (wanted, "")
