"""`collector images ...`: the agents' Docker images (a sub-app added to the CLI in cli.py).
Exit codes: 0 done, 1 a build failed or generated files are stale (--check), 2 bad input or
no Docker daemon."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fwbench.collector.baseimage import make_base_image
from fwbench.collector.dockerfile import GENERATED_MARK, IMAGES_DIR, render
from fwbench.collector.fleet import AGENTS_COMPOSE, render_agents_compose
from fwbench.collector.images import (
    LOCAL_BASE_IMAGE,
    DockerUnavailable,
    ImageBuildError,
    docker_client,
    ensure_image,
    list_images,
)
from fwbench.collector.manifest import (
    AgentManifest,
    ManifestError,
    discover_manifests,
    manifest_dirs,
)
from fwbench.collector.plan import split_list
from fwbench.collector.session import nvidia_gpu_present

images_app = typer.Typer(no_args_is_help=True, help="Build and list the agents' Docker images.")
console = Console(width=None if sys.stdout.isatty() else 160)
errors = Console(stderr=True)
ManifestDirs = Annotated[
    list[Path] | None,
    typer.Option("--manifests", help="Extra folder of agent manifests (repeatable)."),
]


def _fail(message: str, code: int = 2) -> NoReturn:
    errors.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _declared(extra: list[Path] | None) -> dict[str, AgentManifest]:
    try:
        return discover_manifests(manifest_dirs(extra))
    except ManifestError as error:
        _fail(str(error))


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
    declared = _declared(manifests)
    gpu = nvidia_gpu_present()
    names = split_list(agents) or [n for n, m in declared.items() if gpu or not m.requires_gpu]
    unknown = [n for n in names if n not in declared]
    if unknown:
        _fail(f"unknown agents {', '.join(unknown)}; declared: {', '.join(declared)}")
    try:
        client = docker_client()
    except DockerUnavailable as error:
        _fail(str(error))
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
        raise typer.Exit(1)


@images_app.command("list")
def list_command() -> None:
    """Agent images on the Docker daemon, with the versions their labels record."""
    try:
        client = docker_client()
    except DockerUnavailable as error:
        _fail(str(error))
    table = Table("image", "agent", "framework", "version", "variant", "size", "id", "revision")
    for info in list_images(client):
        labels = info.labels
        table.add_row(
            info.tag,
            labels.get("fwbench.agent", ""),
            labels.get("fwbench.framework", ""),
            labels.get("fwbench.framework-version", ""),
            labels.get("fwbench.variant", ""),
            _size(info.size_bytes),
            info.id[7:19],
            labels.get("org.opencontainers.image.revision", ""),
        )
    console.print(table)


@images_app.command()
def base(
    tag: Annotated[str, typer.Option(help="Tag of the image to make.")] = LOCAL_BASE_IMAGE,
) -> None:
    """Make a base image from Debian packages, for hosts that cannot pull one.

    mmdebstrap (as root) makes Debian bookworm with Python 3.11; builds use it where
    python:3.11-slim-bookworm cannot be pulled."""
    try:
        make_base_image(docker_client(), tag, errors.print)
    except (DockerUnavailable, ImageBuildError) as error:
        _fail(str(error), 1)
    print(tag)


def generated_files(manifests: dict[str, AgentManifest]) -> dict[Path, str]:
    """What `generate` writes: a Dockerfile per agent (unless its folder holds a hand-written
    one) and the fleet's compose file."""
    files = {AGENTS_COMPOSE: render_agents_compose(manifests.values())}
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
    """Rewrite images/NAME/Dockerfile and compose/agents.yaml from agents/manifests."""
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
        raise typer.Exit(1)
