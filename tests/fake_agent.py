"""A throwaway agent of the framework-free FakePlugin (tests/runtime/fake_plugin.py): its
plugin package and manifest, written where a test wants them. Its steps sleep, so agents made
from it differ by factors the test chooses (FAKE_STEP_SCALE), whatever the CPU. Used by the
Docker tests (as an image) and the integration tests (as local agents)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE_PLUGIN = ROOT / "tests" / "runtime" / "fake_plugin.py"
FAKE_AGENT = "test-fake"

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "fwbench-test-fake-plugin"
version = "0.0.1"
dependencies = ["fwbench-agent-runtime"]

[project.entry-points."fwbench.plugins"]
fake = "fwbench_test_fake.plugin:FakePlugin"
"""

_MANIFEST = """\
schema_version = 1
name = "{name}"
plugin = "fake"
variant = "cpu"
description = "Throwaway agent of the tests (FakePlugin)"

[install]
requirements = []
local_packages = ["{proto}", "{runtime}", "{package}"]

[env]
FAKE_SWITCH = "from-the-manifest"
{env}
[ports]
grpc = 50099
metrics = 9199
"""


def write_fake_agents(root: Path, agents: Mapping[str, Mapping[str, str]]) -> Path:
    """Writes the plugin package once and a manifest per agent (name -> extra environment)
    under `root`; returns the manifests folder."""
    package = root / "plugin"
    (package / "fwbench_test_fake").mkdir(parents=True)
    (package / "fwbench_test_fake" / "__init__.py").write_text("")
    shutil.copy(FAKE_PLUGIN, package / "fwbench_test_fake" / "plugin.py")
    (package / "pyproject.toml").write_text(_PYPROJECT)
    manifests = root / "manifests"
    manifests.mkdir()
    for name, env in agents.items():
        (manifests / f"{name}.toml").write_text(
            _MANIFEST.format(
                name=name,
                proto=ROOT / "proto",
                runtime=ROOT / "agents" / "runtime",
                package=package,
                env="".join(f'{key} = "{value}"\n' for key, value in env.items()),
            )
        )
    return manifests


def write_fake_agent(root: Path, name: str = FAKE_AGENT) -> Path:
    """One fake agent, as the Docker tests use it."""
    return write_fake_agents(root, {name: {}})
