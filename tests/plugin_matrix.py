"""Prints, one per line, `AGENT PLUGIN FOLDER...` for every agent whose manifest makes it its
plugin's representative in the tests ([tests] representative = true) and that this host can
run: `make test-plugins` runs those folders and the plugin contract suite in that agent's
environment. Derived from the manifests, so a new plugin's tests need no Makefile edit."""

from __future__ import annotations

from pathlib import Path

from fwbench.collector.agents.host import nvidia_gpu_present
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests

ROOT = Path(__file__).resolve().parents[1]


def representatives() -> list[AgentManifest]:
    gpu = nvidia_gpu_present()
    shipped = discover_manifests([ROOT / "agents" / "manifests"])
    return [m for m in shipped.values() if m.representative and (gpu or not m.requires_gpu)]


if __name__ == "__main__":
    for manifest in representatives():
        folders = " ".join(str(p.relative_to(ROOT)) for p in manifest.plugin_tests)
        print(f"{manifest.name} {manifest.plugin} {folders}".rstrip())
