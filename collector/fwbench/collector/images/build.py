"""Agent images: build them from manifests (`collector images build`), find them, list them;
the base each is built on: images/bases.py.

An image is tagged fwbench/NAME:latest and labelled with a build key (Dockerfile, requirements,
agent sources, base image): an image whose key differs from the manifest's is stale, and the
Docker launcher rebuilds it before use, as the local launcher refreshes an environment. Builds
run the docker CLI with BuildKit (the Docker SDK speaks only the legacy builder); everything
else goes through the Docker SDK."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from filelock import FileLock

from fwbench.collector import __version__
from fwbench.collector.agents.docker_engine import ImageInfo
from fwbench.collector.agents.image_labels import SCHEMA_LABEL
from fwbench.collector.agents.locks import current_lock
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.images.bases import BASE_IMAGE_VARIABLE as BASE_IMAGE_VARIABLE
from fwbench.collector.images.bases import find_image as find_image
from fwbench.collector.images.bases import found_base, present_base
from fwbench.collector.images.bases import resolve_base as resolve_base
from fwbench.collector.images.dockerfile import IMAGES_DIR, dockerfile_for
from fwbench.collector.images.errors import ImageBuildError as ImageBuildError
from fwbench.collector.images.local_base import LOCAL_BASE_IMAGE as LOCAL_BASE_IMAGE
from fwbench.collector.images.wheelhouse import (
    WheelhouseError,
    agent_wheels,
    sources_key_of,
    stage_context,
    wheelhouse_root,
)
from fwbench.spec import settings

if TYPE_CHECKING:
    import docker

IMAGE_REPOSITORY = "fwbench"
DOCKER_CLI_VARIABLE = settings.DOCKER_CLI
BUILD_KEY_LABEL = "fwbench.build-key"


def image_tag(manifest: AgentManifest) -> str:
    return f"{IMAGE_REPOSITORY}/{manifest.name}:latest"


def build_key(manifest: AgentManifest, base: str, base_id: str) -> str:
    """What decides the image's content, short of the wheels' own bytes."""
    text, folder = dockerfile_for(manifest)
    parts = [
        text,
        base,
        base_id,
        manifest.requirements,
        manifest.pip_args,
        lock.read_text("utf-8") if (lock := current_lock(manifest)) else "",
        *(sources_key_of(p) for p in manifest.local_packages),
    ]
    if folder is not None:
        parts.append(sources_key_of(folder))
    return hashlib.sha256(json.dumps(parts, default=list).encode()).hexdigest()[:16]


def ensure_image(
    client: docker.DockerClient,
    manifest: AgentManifest,
    report: Callable[[str], None] = lambda _: None,
    force: bool = False,
) -> ImageInfo:
    """The agent's current image, built first when missing or stale (minutes on first use;
    seconds when only the agent's sources changed). A current image is used as it is: its
    base is what is here (present_base), nothing pulled or said; only a build looks for its
    base in a registry (images/bases.py). Safe to call from several threads or collectors at
    once: they take turns on a lock per agent. Raises ImageBuildError."""
    contexts = wheelhouse_root().parent / "image-context"
    contexts.mkdir(parents=True, exist_ok=True)
    with FileLock(contexts / f"{manifest.name}.lock"):
        found = None if force else find_image(client, image_tag(manifest))
        here = present_base(client, manifest) if found else None
        if found and here and found.labels.get(BUILD_KEY_LABEL) == build_key(manifest, *here):
            return found
        base, base_id = found_base(client, manifest, report)
        key = build_key(manifest, base, base_id)
        if found and found.labels.get(BUILD_KEY_LABEL) == key:
            return found
        report(f"building image {image_tag(manifest)} on {base}")
        return _build(client, manifest, base, key, report)


def _build(
    client: docker.DockerClient,
    manifest: AgentManifest,
    base: str,
    key: str,
    report: Callable[[str], None],
) -> ImageInfo:
    try:
        wheels = agent_wheels(manifest, report)
    except WheelhouseError as error:
        raise ImageBuildError(f"{manifest.name}: {error}") from None
    context = wheelhouse_root().parent / "image-context" / manifest.name
    stage_context(wheels, context)
    text, folder = dockerfile_for(manifest)
    if folder is not None:
        shutil.copytree(folder, context, dirs_exist_ok=True)
    (context / "Dockerfile").write_text(text)
    args = {
        "BASE_IMAGE": base,
        "BASE_DIGEST": base.partition("@")[2],
        "VERSION": __version__,
        "CREATED": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "SOURCE": _source(),
        "REVISION": _revision(),
        "FRAMEWORK_VERSION": wheels.version_of(manifest.requirements[0])
        if manifest.requirements
        else "",
        "PACKAGES": " ".join(wheels.pins()),
        "BUILD_KEY": key,
    }
    command, env = buildkit_command()
    command += ["--progress=plain", "--tag", image_tag(manifest)]
    for name, value in args.items():
        command += ["--build-arg", f"{name}={value}"]
    log = context.parent / f"{manifest.name}.log"
    with log.open("w") as stream:
        done = subprocess.run(
            [*command, str(context)],
            stdout=stream,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    if done.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        raise ImageBuildError(
            f"building {image_tag(manifest)} failed: {' / '.join(tail)} (log: {log})"
        )
    info = find_image(client, image_tag(manifest))
    assert info is not None, "docker build succeeded but left no image"
    return info


def buildkit_command() -> tuple[list[str], dict[str, str]]:
    """A docker CLI command that builds with BuildKit into the daemon's image store: `docker
    buildx build --load` where buildx is installed, else the BuildKit client built into docker
    CLIs before 23 (Debian bookworm's docker.io). $FWBENCH_DOCKER_CLI is tried first."""
    preferred = os.environ.get(DOCKER_CLI_VARIABLE)
    candidates = [preferred] if preferred else []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = Path(folder) / "docker"
        if path.is_file() and os.access(path, os.X_OK) and str(path) not in candidates:
            candidates.append(str(path))
    for cli in candidates:
        if _quiet([cli, "buildx", "version"]):
            return [cli, "buildx", "build", "--load"], {}
        version = _output([cli, "--version"])  # "Docker version 20.10.24+dfsg1, build ..."
        major = version.removeprefix("Docker version ").split(".")[0]
        if major.isdigit() and int(major) < 23:
            return [cli, "build"], {"DOCKER_BUILDKIT": "1"}
    raise ImageBuildError(
        f"no docker CLI that builds with BuildKit among {candidates or ['none on PATH']}: "
        "install the buildx plugin (or Debian's docker.io), or set "
        f"{DOCKER_CLI_VARIABLE}"
    )


def _quiet(command: list[str]) -> bool:
    return subprocess.run(command, capture_output=True).returncode == 0


def _output(command: list[str]) -> str:
    done = subprocess.run(command, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def _source() -> str:
    """Where the image's source lives: the checkout's origin, when it has one."""
    checkout = IMAGES_DIR.parent
    return (
        _output(["git", "-C", str(checkout), "remote", "get-url", "origin"])
        if (checkout / ".git").exists()
        else ""
    )


def _revision() -> str:
    checkout = IMAGES_DIR.parent
    if not (checkout / ".git").exists():
        return "unknown"
    commit = _output(["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"])
    dirty = _output(["git", "-C", str(checkout), "status", "--porcelain", "--", "agents", "proto"])
    return (commit or "unknown") + ("-dirty" if dirty else "")


def list_images(client: docker.DockerClient) -> list[ImageInfo]:
    """Every agent image on the daemon, by tag: the repository's (an fwbench.agent label) and
    those that declare themselves (an fwbench.label-schema label, docs/image-labels.md)."""
    found: dict[tuple[str, str], ImageInfo] = {}
    for label in ("fwbench.agent", SCHEMA_LABEL):
        for image in client.images.list(filters={"label": label, "dangling": False}):
            for tag in image.tags or ["<none>"]:
                found[str(image.id), tag] = ImageInfo.of(image, tag)
    return sorted(found.values(), key=lambda info: info.tag)


def image_source(info: ImageInfo) -> str:
    """What declares the image's agent: "manifest" (built by `collector images build` from a
    manifest file) or "image" (its own labels: built by whoever ships it)."""
    return "manifest" if info.labels.get(BUILD_KEY_LABEL) else "image"
