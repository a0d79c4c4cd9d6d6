"""`collector k8s render`: Kubernetes manifests for agents and distributed worlds, to apply to
a cluster with kubectl (docs/cluster.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fwbench.collector.cli.common import ManifestDirs, fail, fail_with, load_manifests

k8s_app = typer.Typer(help="Kubernetes: manifests for agents and worlds (docs/cluster.md).")


@k8s_app.command("render")
def render_manifests(
    agents: Annotated[str, typer.Option(help="Comma-separated agent names.")],
    world_sizes: Annotated[
        str,
        typer.Option(
            help="World sizes (pods per world), e.g. 1,2 (a world of one is told WORLD_SIZE "
            "and RANK); default: each agent alone, one pod."
        ),
    ] = "",
    cpus: Annotated[int, typer.Option(min=1, help="Whole CPUs per pod (requests = limits).")] = 1,
    memory: Annotated[str, typer.Option(help="Memory per pod (requests = limits).")] = "4Gi",
    registry: Annotated[
        str, typer.Option(help="Registry prefix of the agents' images, e.g. registry.example/")
    ] = "",
    namespace: Annotated[str, typer.Option(help="Namespace of every object.")] = "default",
    run_id: Annotated[str, typer.Option(help="Run id in names and labels (default: new).")] = "",
    pod_monitor: Annotated[
        bool, typer.Option(help="Add a Prometheus Operator PodMonitor for the agents.")
    ] = False,
    k8s: Annotated[
        list[str] | None,
        typer.Option(
            "--k8s",
            help="Pod options of `collector run --k8s` (repeatable): node_selector=L=V[,L=V], "
            "tolerations=KEY[=VALUE]:EFFECT[,...], pull_secrets=A[,B], shm=SIZE, queue=QUEUE "
            "(Kueue), collector_cidrs=CIDR[,CIDR], network_policy=on|off (docs/cluster.md).",
        ),
    ] = None,
    out: Annotated[Path | None, typer.Option(help="YAML file (default: stdout).")] = None,
    manifests: ManifestDirs = None,
) -> None:
    """Print (or write) an Indexed Job and a headless Service per agent and world size."""
    from fwbench.collector.cli.worlds import parse_world_sizes
    from fwbench.collector.images.build import image_tag
    from fwbench.collector.launchers.kubernetes_objects import PodShape, render
    from fwbench.collector.launchers.kubernetes_options import parse_k8s_options
    from fwbench.collector.run.metadata import new_run_id
    from fwbench.collector.run.plan import SelectionError, split_list

    declared = load_manifests(manifests)
    names = split_list(agents)
    unknown = [name for name in names if name not in declared] or ([] if names else [""])
    if unknown:  # this host's GPUs do not matter: the pods run on the cluster's nodes
        fail(f"unknown agent {unknown[0]!r}; declared agents: {', '.join(declared)}")
    try:
        parsed = parse_world_sizes(world_sizes, None, "0") if world_sizes else ()
    except SelectionError as error:
        fail_with(error)
    if any(devices > 1 for _, devices in parsed):
        fail("k8s render: a world of one process of several devices (1xD) is not rendered yet")
    sizes = tuple(ranks for ranks, _ in parsed)
    given = k8s or []
    own = [o for o in given if o.partition("=")[0] in ("namespace", "registry", "cpus", "memory")]
    if own:
        key = own[0].partition("=")[0]
        fail(f"k8s render takes --{key}, not --k8s {key}=")
    try:
        options = parse_k8s_options(given).pods
    except ValueError as error:
        fail(str(error))
    chosen = [(declared[name], registry + image_tag(declared[name])) for name in names]
    objects = render(
        chosen,
        run_id or new_run_id(),
        sizes,
        PodShape(cpus, memory),
        namespace,
        pod_monitor,
        options,
    )
    import yaml  # only here: the collector's other commands run where PyYAML is not (a GPU host)

    text = yaml.safe_dump_all(objects, sort_keys=False)
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text)
        typer.echo(f"wrote {len(objects)} objects to {out}", err=True)
