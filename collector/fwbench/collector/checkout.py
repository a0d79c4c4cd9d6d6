"""Where the project's own files are (agents/manifests, images/, compose/), found by what they
hold rather than by a fixed depth: beside the collector's sources in a checkout or an editable
install, or wherever $FWBENCH_HOME points (an installed collector used with a checkout
elsewhere). None when there is neither: agents then come from --manifests or
$FWBENCH_MANIFEST_PATH."""

from __future__ import annotations

import os
from pathlib import Path

from fwbench.spec import settings

HOME_VARIABLE = settings.HOME


def is_project_root(path: Path) -> bool:
    return (path / "agents" / "manifests").is_dir() and (path / "proto").is_dir()


def project_root() -> Path | None:
    explicit = os.environ.get(HOME_VARIABLE)
    if explicit:
        return Path(explicit).resolve()
    return next((p for p in Path(__file__).resolve().parents if is_project_root(p)), None)


def project_dir(name: str) -> Path:
    """A folder of the project (images, compose, ...): in the project root, else in the
    working directory (an installed collector run from inside a checkout)."""
    return (project_root() or Path.cwd()) / name
