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

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.checkout import project_dir
from fwbench.collector.images.build import image_tag
from fwbench.collector.images.dockerfile import GENERATED_MARK

COMPOSE_DIR = project_dir("compose")
AGENTS_COMPOSE = COMPOSE_DIR / "agents.yaml"
PROMETHEUS_TARGETS = COMPOSE_DIR / "prometheus" / "targets" / "agents.json"
PUBLISH_VARIABLE = "FWBENCH_PUBLISH_ADDRESS"

_HEADER = f"""\
{GENERATED_MARK}agents/manifests/*.toml by `collector images generate`; do not edit.
# Images come from `collector images build` and are never pulled. Ports are published on
# ${{{PUBLISH_VARIABLE}:-127.0.0.1}}: set {PUBLISH_VARIABLE}=0.0.0.0 to let collectors on other
# hosts attach (give the agents a token or TLS first: docs/security.md). GPU agents start
# with `--profile gpu`.
services:
"""


def _service(manifest: AgentManifest) -> list[str]:
    publish = f"${{{PUBLISH_VARIABLE}:-127.0.0.1}}"
    lines = [
        f"  {manifest.name}:",
        f"    image: {image_tag(manifest)}",
        "    pull_policy: never",
        "    restart: unless-stopped",
        "    init: true",
        "    ports:",
        f'      - "{publish}:{manifest.grpc_port}:{manifest.grpc_port}"',
        f'      - "{publish}:{manifest.metrics_port}:{manifest.metrics_port}"',
    ]
    if manifest.requires_gpu:
        lines += [
            "    profiles: [gpu]",
            "    deploy:",
            "      resources:",
            "        reservations:",
            "          devices:",
            "            - driver: nvidia",
            "              count: all",
            "              capabilities: [gpu]",
        ]
    return lines


def render_agents_compose(manifests: Iterable[AgentManifest]) -> str:
    """The compose file text (deterministic: agents in gRPC port order)."""
    ordered = sorted(manifests, key=lambda m: (m.grpc_port, m.name))
    return _HEADER + "\n".join(line for m in ordered for line in _service(m)) + "\n"


def render_prometheus_targets(manifests: Iterable[AgentManifest]) -> str:
    """file_sd targets: each agent's service name and metrics port, labelled with its name."""
    ordered = sorted(manifests, key=lambda m: (m.grpc_port, m.name))
    groups = [
        json.dumps({"targets": [f"{m.name}:{m.metrics_port}"], "labels": {"agent": m.name}})
        for m in ordered
    ]
    return "[\n  " + ",\n  ".join(groups) + "\n]\n"
