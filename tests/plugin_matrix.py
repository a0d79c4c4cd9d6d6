"""Prints, one per line, `AGENT PLUGIN FOLDER...` for every agent whose manifest makes it its
plugin's representative in the tests ([tests] representative = true) and that this host can
run: `make test-plugins` runs those folders and the plugin contract suite in that agent's
environment. Derived from the manifests, so a new plugin's tests need no Makefile edit.

`plugin_matrix.py --env AGENT` prints that agent's manifest [env] as NAME=VALUE words, for
`env`: the tests run with the switches the agent runs with (KERAS_BACKEND picks Keras'
backend; a plugin may refuse to start without its switch)."""

from __future__ import annotations

import sys
from pathlib import Path

from fwbench.collector.agents.host import nvidia_gpu_present
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests

ROOT = Path(__file__).resolve().parents[1]


def representatives() -> list[AgentManifest]:
    gpu = nvidia_gpu_present()
    shipped = discover_manifests([ROOT / "agents" / "manifests"])
    return [m for m in shipped.values() if m.representative and (gpu or not m.requires_gpu)]


if __name__ == "__main__":
    if sys.argv[1:2] == ["--env"]:
        shipped = discover_manifests([ROOT / "agents" / "manifests"])
        print(" ".join(f"{k}={v}" for k, v in shipped[sys.argv[2]].env.items()))
        sys.exit(0)
    for manifest in representatives():
        folders = " ".join(str(p.relative_to(ROOT)) for p in manifest.plugin_tests)
        print(f"{manifest.name} {manifest.plugin} {folders}".rstrip())
