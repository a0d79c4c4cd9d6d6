"""`collector images ...`: the agents' Docker images (a sub-app of the CLI)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from fwbench.collector.cli.common import (
    ExitCode,
    JsonOutput,
    ManifestDirs,
    console,
    errors,
    fail,
    known_errors,
    load_manifests,
    print_json,
)
from fwbench.collector.images.local_base import LOCAL_BASE_IMAGE

if TYPE_CHECKING:  # Docker's SDK is imported where it is used: `collector images --help` is fast
    from fwbench.collector.agents.docker_engine import ImageInfo
    from fwbench.collector.agents.manifest import AgentManifest

images_app = typer.Typer(no_args_is_help=True, help="Build and list the agents' Docker images.")


def _size(size_bytes: int) -> str:
    return f"{size_bytes / 1e9:.2f} GB"


@images_app.command()
def build(
    agents: Annotated[
        str,
        typer.Argument(help="Comma-separated agents (default: every agent this host can run)."),
    ] = "",
    force: Annotated[bool, typer.Option(help="Rebuild even when the image is current.")] = False,
    manifests: ManifestDirs = None,
) -> None:
    """Build (or refresh) agent images from their manifests.

    No registry is needed once the base image is here: where python:3.11-slim-bookworm cannot
    be pulled, `collector images base` makes one from Debian packages, used instead (or set
    FWBENCH_BASE_IMAGE)."""
    from fwbench.collector.agents.docker_engine import docker_client
    from fwbench.collector.agents.host import nvidia_gpu_present
    from fwbench.collector.images.build import ImageBuildError, ensure_image
    from fwbench.collector.run.plan import split_list

    declared = load_manifests(manifests)
    gpu = nvidia_gpu_present()
    names = split_list(agents) or [n for n, m in declared.items() if gpu or not m.requires_gpu]
    unknown = [n for n in names if n not in declared]
    if unknown:
        fail(f"unknown agents {', '.join(unknown)}; declared: {', '.join(declared)}")
    with known_errors():
        client = docker_client()
    table = Table("agent", "image", "id", "framework", "size", "seconds")
    failed = False
    for name in names:
        started = time.monotonic()
        try:
            info = ensure_image(client, declared[name], errors.print, force=force)
        except ImageBuildError as error:
            errors.print(f"[red]{escape(name)}:[/] {escape(str(error))}", soft_wrap=True)
            failed = True
            continue
        table.add_row(
            name,
            info.tag,
            info.id[7:19],
            info.labels.get("fwbench.framework-version", ""),
            _size(info.size_bytes),
            f"{time.monotonic() - started:.0f}",
        )
    console.print(table)
    if failed:
        raise typer.Exit(ExitCode.FAILED)


@images_app.command("list")
def list_command(as_json: JsonOutput = False) -> None:
    """Agent images on the Docker daemon, with the versions their labels record."""
    from fwbench.collector.agents.docker_engine import docker_client
    from fwbench.collector.images.build import image_source, list_images

    with known_errors():
        client = docker_client()
    images = list_images(client)
    if as_json:
        print_json(
            [
                dict(
                    tag=i.tag,
                    id=i.id,
                    source=image_source(i),
                    size_bytes=i.size_bytes,
                    labels=i.labels,
                )
                for i in images
            ]
        )
        return
    table = Table(
        "image", "agent", "source", "framework", "version", "variant", "size", "id", "revision"
    )
    for info in images:
        labels = info.labels
        declared = declared_by(info) if image_source(info) == "image" else None
        table.add_row(
            info.tag,
            labels.get("fwbench.agent", declared.name if declared else "?"),
            image_source(info),
            labels.get("fwbench.framework", declared.framework if declared else ""),
            labels.get("fwbench.framework-version", ""),
            labels.get("fwbench.variant", declared.variant if declared else ""),
            _size(info.size_bytes),
            info.id[7:19],
            labels.get("org.opencontainers.image.revision", ""),
        )
    console.print(table)


def declared_by(info: ImageInfo) -> AgentManifest | None:
    """The agent the image's labels declare, None when they cannot (the reason is printed)."""
    from fwbench.collector.agents.image_labels import ImageLabelError, manifest_of

    try:
        return manifest_of(info)
    except ImageLabelError as error:
        errors.print(f"[yellow]warning:[/] {escape(str(error))}", soft_wrap=True)
        return None


@images_app.command()
def base(
    tag: Annotated[str, typer.Option(help="Tag of the image to make.")] = LOCAL_BASE_IMAGE,
) -> None:
    """Make a base image from Debian packages, for hosts that cannot pull one.

    mmdebstrap (as root) makes Debian bookworm with Python 3.11; builds use it where
    python:3.11-slim-bookworm cannot be pulled."""
    from fwbench.collector.agents.docker_engine import docker_client
    from fwbench.collector.images.base_image import make_base_image

    with known_errors():
        make_base_image(docker_client(), tag, errors.print)
    print(tag)


def generated_files(manifests: dict[str, AgentManifest]) -> dict[Path, str]:
    """What `generate` writes: a Dockerfile per agent (unless its folder holds a hand-written
    one), the fleet's compose file and Prometheus's targets for it."""
    from fwbench.collector.images.compose import (
        AGENTS_COMPOSE,
        PROMETHEUS_TARGETS,
        render_agents_compose,
        render_prometheus_targets,
    )
    from fwbench.collector.images.dockerfile import GENERATED_MARK, IMAGES_DIR, render

    files = {
        AGENTS_COMPOSE: render_agents_compose(manifests.values()),
        PROMETHEUS_TARGETS: render_prometheus_targets(manifests.values()),
    }
    for name, manifest in manifests.items():
        path = IMAGES_DIR / name / "Dockerfile"
        if not path.is_file() or path.read_text("utf-8").startswith(GENERATED_MARK):
            files[path] = render(manifest)
    return files


@images_app.command()
def generate(
    check: Annotated[
        bool, typer.Option(help="Only report stale files (exit 1), write nothing.")
    ] = False,
) -> None:
    """Rewrite images/NAME/Dockerfile, compose/agents.yaml and Prometheus's targets from
    agents/manifests."""
    from fwbench.collector.agents.manifest import discover_manifests
    from fwbench.collector.images.dockerfile import IMAGES_DIR

    shipped = discover_manifests([IMAGES_DIR.parent / "agents" / "manifests"])
    stale = []
    for path, text in generated_files(shipped).items():
        if path.is_file() and path.read_text("utf-8") == text:
            continue
        stale.append(path)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, "utf-8")
    for path in stale:
        console.print(f"{'stale' if check else 'wrote'} {path}", highlight=False)
    if check and stale:
        raise typer.Exit(ExitCode.FAILED)
