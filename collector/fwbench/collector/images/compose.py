"""The standing fleet's agents as a compose file (compose/agents.yaml, included by
compose/compose.yaml) and as Prometheus's scrape targets (compose/prometheus/targets/
agents.json), rendered from the manifests like the Dockerfiles: each agent's image, its fixed
ports from the manifest's [ports], GPU agents in the `gpu` profile with the NVIDIA GPUs
reserved (their targets are listed too; down until that profile runs). Adding a framework adds
a manifest; `collector images generate` then rewrites both files (a test checks they are
current)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.checkout import project_dir
from fwbench.collector.images.build import image_tag
from fwbench.collector.images.dockerfile import GENERATED_MARK
from fwbench.spec import settings

COMPOSE_DIR = project_dir("compose")
AGENTS_COMPOSE = COMPOSE_DIR / "agents.yaml"
PROMETHEUS_TARGETS = COMPOSE_DIR / "prometheus" / "targets" / "agents.json"
PUBLISH_VARIABLE = settings.PUBLISH_ADDRESS

_HEADER = f"""\
{GENERATED_MARK}agents/manifests/*.toml by `collector images generate`; do not edit.
# Images come from `collector images build` and are never pulled. Ports are published on
# ${{{PUBLISH_VARIABLE}:-127.0.0.1}}: set {PUBLISH_VARIABLE}=0.0.0.0 to let collectors on other
# hosts attach (give the agents a token or TLS first: docs/security.md). GPU agents start
# with `--profile gpu`.
"""


def _service(manifest: AgentManifest) -> dict[str, Any]:
    publish = f"${{{PUBLISH_VARIABLE}:-127.0.0.1}}"
    service: dict[str, Any] = {
        "image": image_tag(manifest),
        "pull_policy": "never",
        "restart": "unless-stopped",
        "init": True,
        "ports": [
            f"{publish}:{manifest.grpc_port}:{manifest.grpc_port}",
            f"{publish}:{manifest.metrics_port}:{manifest.metrics_port}",
        ],
    }
    if manifest.requires_gpu:
        gpus = {"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}
        service["profiles"] = ["gpu"]
        service["deploy"] = {"resources": {"reservations": {"devices": [gpus]}}}
    return service


def render_agents_compose(manifests: Iterable[AgentManifest]) -> str:
    """The compose file text (deterministic: agents in gRPC port order), written by PyYAML."""
    import yaml  # only `collector images generate` writes it: a GPU host's CLI goes without

    ordered = sorted(manifests, key=lambda m: (m.grpc_port, m.name))
    services = {"services": {m.name: _service(m) for m in ordered}}
    return _HEADER + yaml.safe_dump(services, sort_keys=False, width=100)


def render_prometheus_targets(manifests: Iterable[AgentManifest]) -> str:
    """file_sd targets: each agent's service name and metrics port, labelled with its name."""
    ordered = sorted(manifests, key=lambda m: (m.grpc_port, m.name))
    groups = [
        json.dumps({"targets": [f"{m.name}:{m.metrics_port}"], "labels": {"agent": m.name}})
        for m in ordered
    ]
    return "[\n  " + ",\n  ".join(groups) + "\n]\n"
