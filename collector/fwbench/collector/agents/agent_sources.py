"""The agent's own packages (its manifest's local_packages: protocol, runtime, plugin) as
sources: their content's digest, which names what an environment, an overlay or an image holds
of them, and copies of them to build from."""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterable
from pathlib import Path

from fwbench.collector.agents.manifest import AgentManifest

_SKIP_PARTS = {"__pycache__", "build", ".egg-info", ".mypy_cache", ".pytest_cache"}


def _is_artefact(name: str) -> bool:
    """A file or folder a build or a tool leaves in a package's folder: not a source."""
    return name in _SKIP_PARTS or name.endswith(".egg-info")


def sources_key(manifest: AgentManifest) -> str:
    digest = hashlib.sha256()
    for package in manifest.local_packages:
        for path in sorted(package.rglob("*")):
            relative = path.relative_to(package)
            if path.is_file() and not any(_is_artefact(part) for part in relative.parts):
                digest.update(str(relative).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def copy_sources(packages: Iterable[Path], folder: Path) -> list[Path]:
    """Copies of local packages' sources (what sources_key counts) in `folder`, for the
    installer to build from: setuptools builds a local package inside its folder (build/,
    *.egg-info), where two builds at once (two environments, an image's wheels, a developer's
    editable install) would meet."""
    copies = []
    for index, package in enumerate(packages):
        copy = folder / f"{index}-{package.name}"
        shutil.copytree(package, copy, ignore=lambda _, names: list(filter(_is_artefact, names)))
        copies.append(copy)
    return copies
