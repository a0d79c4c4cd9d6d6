"""`collector doctor`: what this host offers each declared agent, why an agent cannot run
here, and the host's state that matters for measurement (load, busy processes, steal, clock
settings: agents/host_state.py). Reads only: it starts no agent, builds no environment or
image, installs nothing, tunes nothing (with --python it asks that interpreter what it has, as
`collector run --python` would)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from fwbench.collector.agents.host_state import DEFAULT_SAMPLE_SECONDS
from fwbench.collector.cli.common import (
    JsonOutput,
    ManifestDirs,
    Pythons,
    console,
    fail_with,
    load_manifests,
    print_json,
)

if TYPE_CHECKING:
    from fwbench.collector.agents.manifest import AgentManifest

BASE_IMAGES = ("python:3.11-slim-bookworm", "fwbench/base:bookworm")


def _docker() -> tuple[dict[str, Any], Any]:
    from fwbench.collector.agents.docker_engine import DockerUnavailable, docker_client
    from fwbench.collector.images.build import find_image

    if shutil.which("docker") is None and shutil.which("dockerd") is None:
        return {"state": "not installed (`make docker-deps` installs Debian's docker.io)"}, None
    try:
        client = docker_client()
    except DockerUnavailable as error:
        return {"state": f"installed, no daemon answers: {error}"}, None
    version = client.version().get("Version", "?")
    bases = [tag for tag in BASE_IMAGES if find_image(client, tag) is not None]
    base = ", ".join(bases) or "none (`collector images base` makes one from Debian packages)"
    return {"state": f"engine {version} answers", "base_images": base}, client


def _local(manifest: AgentManifest, python: str | None) -> tuple[bool, str]:
    from fwbench.collector.agents.environments import EnvironmentBuildError, environment_for
    from fwbench.collector.agents.existing import EnvironmentUnsuitable, ExistingEnvironment
    from fwbench.collector.agents.locks import LockError

    if python:
        try:
            ExistingEnvironment(manifest, Path(python)).ensure()
        except (EnvironmentUnsuitable, EnvironmentBuildError) as error:
            return False, str(error)
        return True, f"existing Python {python}: checked, runs"
    try:
        state, why = environment_for(manifest).status()
    except LockError as error:
        return False, f"its lock does not fit: {error}"
    return True, {
        "ready": "environment ready",
        "stale": "environment ready; agent packages reinstalled on first use (seconds)",
        "missing": "environment made on first use (minutes; needs the package index)",
        "failed": f"environment made again on first use; its last build failed: {why}",
        "broken": f"environment made again on first use; it cannot run its agent: {why}",
    }[state]


def _agent(manifest: AgentManifest, gpu: bool, client: Any, python: str | None) -> dict[str, Any]:
    from fwbench.collector.images.build import find_image, image_tag

    row: dict[str, Any] = {"agent": manifest.name, "requires_gpu": manifest.requires_gpu}
    if manifest.requires_gpu and not gpu:
        why = "needs an NVIDIA GPU and driver; this host has none"
        return {**row, "runs": False, "local": why, "docker": why}
    local_ok, row["local"] = _local(manifest, python)
    if client is None:
        row["docker"], docker_ok = "no Docker engine", False
    else:
        image = find_image(client, image_tag(manifest))
        docker_ok = True
        row["docker"] = f"image {image.tag} present" if image else "image built on first use"
    row["runs"] = local_ok or docker_ok
    return row


def doctor(
    python: Pythons = None,
    manifests: ManifestDirs = None,
    sample: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=60.0,
            metavar="SECONDS",
            help="How long to watch the CPUs for busy processes and steal time.",
        ),
    ] = DEFAULT_SAMPLE_SECONDS,
    json_output: JsonOutput = False,
) -> None:
    """What this host offers each declared agent: Python, Docker, the NVIDIA driver, NVML and
    its GPUs, and which agents can run here and how (or why not); then the host's state that
    matters for measurement (load, busy processes, steal, governor, turbo, SMT), as pyperf's
    `system show` reads it. Installs and tunes nothing."""
    from fwbench.collector.agents.existing import EnvironmentUnsuitable, parse_pythons
    from fwbench.collector.agents.host import host_facts, nvidia_facts
    from fwbench.collector.agents.host_state import UNREADABLE, as_json, measurement_state

    declared = load_manifests(manifests)
    try:
        pythons = parse_pythons(python or [], declared)
    except EnvironmentUnsuitable as error:
        fail_with(error)
    host = host_facts()
    nvidia = nvidia_facts()
    docker_state, client = _docker()
    try:
        agents = [
            _agent(m, nvidia.driver_loaded, client, pythons.get(n) or pythons.get(""))
            for n, m in declared.items()
        ]
    finally:
        if client is not None:
            client.close()
    measurement = measurement_state(sample)
    if json_output:
        print_json(
            {
                "host": host,
                "nvidia": nvidia.__dict__,
                "docker": docker_state,
                "agents": agents,
                "measurement": as_json(measurement),
            }
        )
        return
    facts = Table("", "", title="this host", show_header=False)
    memory = f"{host['memory_bytes'] / 2**30:.1f} GiB"
    cpus = (
        f"{host['cpu_model']}, {host['logical_cpus']} logical CPUs ({host['usable_cpus']} usable)"
    )
    for key, value in (
        ("host", f"{host['hostname']} ({host['os']})"),
        ("CPU", cpus),
        ("memory", memory),
        ("collector Python", host["collector_python"]),
        ("Docker", docker_state["state"]),
        *((("base image", docker_state["base_images"]),) if "base_images" in docker_state else ()),
        ("NVIDIA driver", nvidia.driver_version or ("loaded" if nvidia.driver_loaded else "none")),
        ("NVML", nvidia.nvml),
    ):
        facts.add_row(key, escape(str(value)))
    for device in nvidia.devices:
        facts.add_row(
            f"GPU {device['index']}", f"{device['name']}, {device['memory_bytes'] / 2**30:.1f} GiB"
        )
    console.print(facts)
    table = Table("agent", "GPU", "runs here", "local", "docker", title="agents")
    for row in agents:
        runs = "[green]yes[/]" if row["runs"] else "[red]no[/]"
        gpu = "needs one" if row["requires_gpu"] else ""
        table.add_row(row["agent"], gpu, runs, escape(row["local"]), escape(row["docker"]))
    console.print(table)
    state = Table("", "state", "advice", title="measuring here now")
    for reading in measurement:
        shown = f"[dim]{escape(reading.state)}[/]" if UNREADABLE in reading.state else None
        advice = f"[yellow]{escape(reading.advice)}[/]" if reading.advice else ""
        state.add_row(reading.name, shown or escape(reading.state), advice)
    console.print(state)
