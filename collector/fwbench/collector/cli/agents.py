"""`collector agents`, `collector env`, `collector describe`: the declared agents, their
environments, and what a running agent says of itself."""

from __future__ import annotations

import json
from contextlib import closing
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from fwbench.collector.cli.common import (
    ExitCode,
    JsonOutput,
    ManifestDirs,
    command_logs,
    console,
    errors,
    fail,
    known_errors,
    load_manifests,
    print_json,
    take_interrupts_once,
)
from fwbench.collector.cli.security import (
    AgentTokenFile,
    TlsCa,
    TlsCert,
    TlsKey,
    security_settings,
)


def list_agents(manifests: ManifestDirs = None, as_json: JsonOutput = False) -> None:
    """List declared agents: those of manifest files, with whether their local environment
    is ready (or missing, stale, failed or broken, and why), and images in the local Docker
    engine that declare an agent by their labels (run them with `collector run --launcher
    docker --agents IMAGE`)."""
    from fwbench.collector.agents.environments import environment_for
    from fwbench.collector.agents.locks import LockError, lock_state

    rows: list[dict[str, str]] = []
    for name, manifest in load_manifests(manifests).items():
        try:
            env = environment_for(manifest)
        except LockError:
            env = None
        state, why = env.status() if env else ("needs `collector lock`", "")
        rows.append(
            {
                "agent": name,
                "source": "manifest",
                "plugin": manifest.plugin,
                "variant": manifest.variant,
                "requires_gpu": str(manifest.requires_gpu).lower(),
                "environment": state,
                "environment_problem": why,  # a failed build's error, or what a check lacks
                "lock": lock_state(manifest).value,
                "environment_path": str(env.path) if env else "",
                "description": manifest.description,
            }
        )
    rows += _image_rows()
    if as_json:
        print_json(rows)
        return
    table = Table("agent", "source", "plugin", "variant", "lock", "environment", "description")
    for row in rows:
        why = f": {row['environment_problem']}" if row.get("environment_problem") else ""
        environment = row.get("image") or f"{row['environment']}{why} ({row['environment_path']})"
        cells = (row["agent"], row["source"], row["plugin"], row["variant"], row["lock"])
        table.add_row(*cells, environment, row["description"])
    console.print(table)


def _image_rows() -> list[dict[str, str]]:
    """An agent per image in the local engine that declares one by its labels (not those
    `collector images build` made from manifests: their agents are listed already). Without
    a Docker daemon, none, and a note on stderr saying so."""
    from fwbench.collector.agents.docker_engine import DockerUnavailable, docker_client
    from fwbench.collector.agents.image_labels import ImageLabelError, manifest_of
    from fwbench.collector.images.build import image_source, list_images

    try:
        with closing(docker_client()) as client:
            images = list_images(client)
    except DockerUnavailable as error:
        errors.print(f"images not listed: {escape(str(error))}", soft_wrap=True)
        return []
    rows = []
    for info in images:
        if image_source(info) != "image":
            continue
        try:
            manifest = manifest_of(info)
        except ImageLabelError as error:
            errors.print(f"[yellow]not listed:[/] {escape(str(error))}", soft_wrap=True)
            continue
        rows.append(
            {
                "agent": manifest.name,
                "source": "image",
                "plugin": manifest.plugin or manifest.framework,
                "variant": manifest.variant,
                "requires_gpu": str(manifest.requires_gpu).lower(),
                "environment": "image",
                "lock": "-",
                "environment_path": "",
                "image": info.tag if info.tag != "<none>" else info.id,
                "image_id": info.id,
                "description": manifest.description,
            }
        )
    return rows


def env(
    agent: Annotated[str, typer.Argument(help="Declared agent name.")],
    manifests: ManifestDirs = None,
) -> None:
    """Create or refresh an agent's local environment and print its Python interpreter."""
    from fwbench.collector.agents.environments import environment_for

    declared = load_manifests(manifests)
    if agent not in declared:
        fail(f"unknown agent {agent!r}; declared agents: {', '.join(declared)}")
    environment = environment_for(declared[agent])
    with known_errors():
        environment.ensure(lambda line: errors.print(line))
    print(environment.python)


def describe(
    agent: Annotated[str, typer.Argument(help="Declared agent name or NAME@HOST:PORT.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw Describe reply.")] = False,
    manifests: ManifestDirs = None,
    agent_token_file: AgentTokenFile = None,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
) -> None:
    """Start (or reach) an agent and print what it reports about itself."""
    from google.protobuf.json_format import MessageToDict

    from fwbench.collector.agents.specs import Instance, one_agent, resolve_agents
    from fwbench.collector.launchers.attached import attach
    from fwbench.collector.launchers.local import start_local

    security = security_settings(agent_token_file, tls_ca, tls_cert, tls_key)
    declared = load_manifests(manifests)
    take_interrupts_once()
    # Kept on every way out (a failed start's error carries the log's last line).
    with command_logs("describe") as logs:
        try:
            with known_errors():
                instance = Instance.from_spec(agent)
                resolve_agents([instance], declared)
                one_agent(agent)
                handle = (
                    attach(instance, instance.address, security=security)
                    if instance.attached
                    else start_local(declared[agent], logs, report=lambda line: errors.print(line))
                )
        except KeyboardInterrupt:
            fail("interrupted", ExitCode.INTERRUPTED)
        try:
            with known_errors():
                reply = MessageToDict(handle.client.describe(), preserving_proto_field_name=True)
        except KeyboardInterrupt:
            fail("interrupted", ExitCode.INTERRUPTED)
        finally:
            handle.stop()
    if as_json:
        print(json.dumps(reply, indent=2))
        return
    workloads = reply.pop("workloads", [])
    reads, writes = reply.pop("model_formats", []), reply.pop("export_formats", [])
    profiler = reply.pop("profiler", "") or f"none ({reply.pop('no_profiler', 'not said why')})"
    console.print_json(json.dumps(reply))
    console.print("workloads: " + ", ".join(w["name"] for w in workloads))
    console.print(
        f"model files it reads: {', '.join(reads) or 'none'}; writes (--export): "
        f"{', '.join(writes) or 'none'}",
        highlight=False,
    )
    console.print(f"profiler (--profile): {profiler}", highlight=False)


def lock(
    agents: Annotated[
        str, typer.Argument(help="Comma-separated agents (default: every declared agent).")
    ] = "",
    check: Annotated[
        bool, typer.Option(help="Only report missing or stale locks (exit 1), write nothing.")
    ] = False,
    manifests: ManifestDirs = None,
) -> None:
    """Make each agent's locked, hashed requirements (NAME.lock beside its manifest)."""
    from fwbench.collector.agents.locks import LockError, LockState, lock_state, write_lock
    from fwbench.collector.run.plan import split_list

    declared = load_manifests(manifests)
    names = split_list(agents) or list(declared)
    unknown = [n for n in names if n not in declared]
    if unknown:
        fail(f"unknown agents {', '.join(unknown)}; declared: {', '.join(declared)}")
    failed = False
    for name in names:
        state = lock_state(declared[name])
        if check:
            failed |= state != LockState.CURRENT
            console.print(f"{name}: {state}", highlight=False)
            continue
        try:
            path = write_lock(declared[name], lambda line: errors.print(line))
        except LockError as error:
            errors.print(f"[red]{escape(name)}:[/] {escape(str(error))}", soft_wrap=True)
            failed = True
            continue
        console.print(f"{name}: wrote {path}", highlight=False)
    if failed:
        raise typer.Exit(ExitCode.FAILED)
