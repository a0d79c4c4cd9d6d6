"""An agent's Dockerfile, rendered from its manifest so that the image and the local
environment cannot drift: images/NAME/Dockerfile holds the rendering for every manifest in
agents/manifests (`collector images generate` rewrites them, a test checks they are current).

Two base kinds: CPU agents start from python:3.11-slim-bookworm, GPU agents from NVIDIA's CUDA
runtime image. `FROM` is the build argument BASE_IMAGE either way, so a host that cannot pull
builds the same file on a base made from Debian packages (`collector images base`).

Every image has the same first stage, `runtime` (a non-root user, a virtual environment, the
agent runtime's third-party dependencies), so images of one base kind share its layers; the
next layer adds the framework's wheels, and the manifest's switches come after the last one,
so two variants of one framework (tf-mkl, tf-eigen) share every layer but their metadata. The
agent's own packages (protocol, runtime, plugin) are the last layer, kilobytes, so editing them
rebuilds only that. The build context holds three wheel folders, runtime/, agent/ and fwbench/,
each with a pinned requirements.txt (see wheelhouse.py); they are bind-mounted, never copied,
so no wheel stays in a layer. BuildKit is required."""

from __future__ import annotations

import json
from pathlib import Path

from fwbench.collector.agents.image_labels import schema_labels
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.checkout import project_dir
from fwbench.spec import startup

CPU_BASE_IMAGE = "python:3.11-slim-bookworm"
CUDA_BASE_IMAGE = "nvidia/cuda:12.8.1-cudnn-runtime-ubuntu22.04"
GENERATED_MARK = "# Generated from "
IMAGES_DIR = project_dir("images")
AGENT_USER_ID = 10001
LICENSE = "Apache-2.0"  # SPDX id of the project's LICENSE file

_HEADER = """\
{mark}{manifest} by `collector images generate`; edit
# the manifest or collector/fwbench/collector/images/dockerfile.py, not this file.
# `collector images build {name}` stages the build context (runtime/ and agent/ wheel
# folders) and builds it. BASE_IMAGE: any image with Python 3.11 and its venv module.
ARG BASE_IMAGE={base}

FROM ${{BASE_IMAGE}} AS runtime
"""

_CUDA_PYTHON = """\
# The CUDA runtime images carry no Python; Ubuntu 22.04 has 3.11 (the wheelhouse's) in universe.
# hadolint ignore=DL3008
RUN apt-get update \\
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \\
    && rm -rf /var/lib/apt/lists/*
"""

_RUNTIME = """\
ENV PATH=/opt/fwbench/venv/bin:$PATH \\
    PIP_NO_CACHE_DIR=1 \\
    PIP_DISABLE_PIP_VERSION_CHECK=1 \\
    PYTHONUNBUFFERED=1
RUN useradd --system --uid {uid} --user-group --create-home --home-dir /home/fwbench fwbench \\
    && python3.11 -m venv /opt/fwbench/venv
RUN --mount=type=bind,source=runtime,target=/tmp/wheels \\
    pip install --no-index --find-links /tmp/wheels -r /tmp/wheels/requirements.txt

FROM runtime AS agent
RUN --mount=type=bind,source=agent,target=/tmp/wheels \\
    pip install --no-index --find-links /tmp/wheels -r /tmp/wheels/requirements.txt
RUN --mount=type=bind,source=fwbench,target=/tmp/wheels \\
    pip install --no-index --no-deps --find-links /tmp/wheels -r /tmp/wheels/requirements.txt \\
    && pip check
"""

_AGENT = """\
ENV {env}
ARG BASE_IMAGE
ARG BASE_DIGEST=""
ARG VERSION=unknown
ARG CREATED=""
ARG SOURCE=""
ARG REVISION=unknown
ARG FRAMEWORK_VERSION=unknown
ARG PACKAGES=""
ARG BUILD_KEY=""
LABEL {labels}
USER {uid}:{uid}
WORKDIR /home/fwbench
EXPOSE {grpc_port} {metrics_port}
HEALTHCHECK --interval=10s --timeout=5s --start-period=300s --retries=3 \\
    CMD ["python", "-m", "fwbench.runtime.healthcheck"]
ENTRYPOINT ["fwbench-agent"]
"""


def base_image(manifest: AgentManifest) -> str:
    """The FROM a user with a registry gets: the CUDA runtime for GPU agents."""
    return CUDA_BASE_IMAGE if manifest.requires_gpu else CPU_BASE_IMAGE


def framework_requirement(manifest: AgentManifest) -> str:
    """The manifest's first requirement names the framework (its version is pinned there)."""
    return manifest.requirements[0] if manifest.requirements else ""


def agent_env(manifest: AgentManifest) -> dict[str, str]:
    """What the agent process finds in its environment: the runtime CLI's deployment facts
    (see fwbench.runtime.cli), then the manifest's own switches."""
    env = {
        startup.PLUGIN: manifest.plugin,
        startup.AGENT_NAME: manifest.name,
        startup.VARIANT: manifest.variant,
        startup.HOST: startup.ANY_HOST,  # inside the container; the launcher publishes ports
        startup.GRPC_PORT: str(manifest.grpc_port),
        startup.METRICS_PORT: str(manifest.metrics_port),
    }
    if manifest.requires_gpu:
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
        env["NVIDIA_VISIBLE_DEVICES"] = "all"
    return {**env, **manifest.env}


def _labels(manifest: AgentManifest) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": f"fwbench agent {manifest.name}",
        "org.opencontainers.image.description": manifest.description,
        "org.opencontainers.image.version": "${VERSION}",
        "org.opencontainers.image.created": "${CREATED}",
        "org.opencontainers.image.source": "${SOURCE}",
        "org.opencontainers.image.licenses": LICENSE,
        "org.opencontainers.image.vendor": "fwbench",
        "org.opencontainers.image.revision": "${REVISION}",
        "org.opencontainers.image.base.name": "${BASE_IMAGE}",
        "org.opencontainers.image.base.digest": "${BASE_DIGEST}",
        "fwbench.agent": manifest.name,
        "fwbench.framework": manifest.plugin,
        "fwbench.variant": manifest.variant,
        "fwbench.framework-requirement": framework_requirement(manifest),
        "fwbench.framework-version": "${FRAMEWORK_VERSION}",
        "fwbench.packages": "${PACKAGES}",
        "fwbench.requires-gpu": str(manifest.requires_gpu).lower(),
        "fwbench.build-key": "${BUILD_KEY}",
        # What any collector needs to run the image (label schema 1, docs/image-labels.md).
        **schema_labels(manifest),
    }


def _pairs(values: dict[str, str]) -> str:
    # JSON strings are valid Dockerfile words: quoted, with \" and \\ escapes.
    return " \\\n    ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in values.items()
    )


def render(manifest: AgentManifest) -> str:
    """The Dockerfile text for this agent (deterministic: same manifest, same bytes)."""
    relative = manifest.path.name
    if manifest.path.parent == IMAGES_DIR.parent / "agents" / "manifests":
        relative = f"agents/manifests/{manifest.path.name}"
    text = _HEADER.format(
        mark=GENERATED_MARK, manifest=relative, name=manifest.name, base=base_image(manifest)
    )
    if manifest.requires_gpu:
        text += _CUDA_PYTHON
    text += _RUNTIME.format(uid=AGENT_USER_ID)
    text += _AGENT.format(
        env=_pairs(agent_env(manifest)),
        labels=_pairs(_labels(manifest)),
        uid=AGENT_USER_ID,
        grpc_port=manifest.grpc_port,
        metrics_port=manifest.metrics_port,
    )
    return text


def dockerfile_for(manifest: AgentManifest) -> tuple[str, Path | None]:
    """(Dockerfile text, image folder or None). A hand-written images/NAME/Dockerfile (one
    without the generated mark) is used as it is, with the rest of its folder; otherwise the
    rendering, which a checked-in generated file must equal."""
    folder = IMAGES_DIR / manifest.name
    checked_in = folder / "Dockerfile"
    if checked_in.is_file():
        text = checked_in.read_text("utf-8")
        if not text.startswith(GENERATED_MARK):
            return text, folder
    return render(manifest), None
