"""Agent manifests: one TOML file per agent (agents/manifests/*.toml) saying how to build its
environment and start it. The same manifests drive the local and (later) Docker launchers."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwbench.collector.agents.docker_engine import ImageInfo
from fwbench.collector.checkout import project_root
from fwbench.spec import settings

MANIFEST_SCHEMA_VERSION = 1
MANIFEST_PATH_VARIABLE = settings.MANIFEST_PATH
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class AgentManifest:
    name: str
    plugin: str  # entry-point name of the framework plugin
    variant: str
    description: str
    path: Path  # the manifest file
    requirements: tuple[str, ...]
    pip_args: tuple[str, ...]
    local_packages: tuple[Path, ...]  # absolute
    env: Mapping[str, str] = field(default_factory=dict)
    grpc_port: int = 50051
    metrics_port: int = 9101
    requires_gpu: bool = False
    # [tests]: this agent stands for its plugin in the cross-agent tests (the plugin's own
    # tests, the plugin contract suite, equivalence); one agent per plugin says so.
    representative: bool = False
    plugin_tests: tuple[Path, ...] = ()  # absolute; run inside this agent's environment
    # An agent declared by an image's labels (agents/image_labels.py), not by a file: that
    # image, which the Docker launcher runs as it is (never built). None for a manifest file.
    image: ImageInfo | None = None
    framework: str = ""  # the image label's framework ("" for a file: its plugin names it)
    # [install] build_requirements: what pip needs to build an sdist of the lock inside the
    # environment, which installs the lock with --no-build-isolation (llama-cpp-python's
    # scikit-build-core); installed first, unhashed. Empty for wheels only.
    build_requirements: tuple[str, ...] = ()
    # [install] build_env: variables for pip while it builds such an sdist (llama-cpp-python's
    # CMAKE_ARGS), in the environment and in an image's wheel folder alike; "{manifest_dir}"
    # in a value stands for the manifest's folder (build_variables), so that the caches' keys,
    # which hold the values as written, are the same in every checkout. Empty for wheels only.
    build_env: Mapping[str, str] = field(default_factory=dict)

    @property
    def build_variables(self) -> dict[str, str]:
        """build_env as pip's build sees it: "{manifest_dir}" made the manifest's folder."""
        folder = str(self.path.parent)
        return {
            name: value.replace("{manifest_dir}", folder) for name, value in self.build_env.items()
        }

    @property
    def source(self) -> str:
        """What declares the agent: "manifest" (a file) or "image" (an image's labels)."""
        return "image" if self.image is not None else "manifest"


def _require(raw: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in raw:
        raise ManifestError(f"{where}: missing field {key!r}")
    if not isinstance(raw[key], kind):
        raise ManifestError(f"{where}: field {key!r} must be a {kind.__name__}")
    return raw[key]


def parse_manifest(path: Path) -> AgentManifest:
    where = str(path)
    try:
        raw = tomllib.loads(path.read_text("utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ManifestError(f"{where}: {error}") from error
    if raw.get("schema_version") != MANIFEST_SCHEMA_VERSION:
        raise ManifestError(f"{where}: schema_version must be {MANIFEST_SCHEMA_VERSION}")
    name = _require(raw, "name", str, where)
    if not NAME_PATTERN.match(name):
        raise ManifestError(f"{where}: name {name!r} must match {NAME_PATTERN.pattern}")
    install = _require(raw, "install", dict, where)
    packages = tuple(
        (path.parent / p).resolve() for p in _require(install, "local_packages", list, where)
    )
    for package in packages:
        if not (package / "pyproject.toml").is_file():
            raise ManifestError(f"{where}: local package {package} has no pyproject.toml")
    env = raw.get("env", {})
    ports = raw.get("ports", {})
    tests = raw.get("tests", {})
    if not isinstance(tests, dict):
        raise ManifestError(f"{where}: [tests] must be a table")
    return AgentManifest(
        name=name,
        plugin=_require(raw, "plugin", str, where),
        variant=raw.get("variant", ""),
        description=raw.get("description", ""),
        path=path.resolve(),
        requirements=tuple(_require(install, "requirements", list, where)),
        pip_args=tuple(install.get("pip_args", [])),
        local_packages=packages,
        env={str(k): str(v) for k, v in env.items()},
        grpc_port=int(ports.get("grpc", 50051)),
        metrics_port=int(ports.get("metrics", 9101)),
        requires_gpu=bool(raw.get("requires_gpu", False)),
        representative=bool(tests.get("representative", False)),
        plugin_tests=tuple((path.parent / p).resolve() for p in tests.get("plugin_tests", [])),
        build_requirements=tuple(install.get("build_requirements", [])),
        build_env=_build_env(install, where),
    )


def _build_env(install: Mapping[str, Any], where: str) -> dict[str, str]:
    """[install] build_env: a table of strings."""
    table = install.get("build_env", {})
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ManifestError(f"{where}: [install] build_env must be a table of strings")
    return {str(name): value for name, value in table.items()}


def manifest_dirs(extra: list[Path] | None = None) -> list[Path]:
    """Where manifests are looked up: explicit dirs, then $FWBENCH_MANIFEST_PATH
    (colon-separated), then agents/manifests of the checkout this collector runs from."""
    dirs = list(extra or [])
    dirs += [Path(p) for p in os.environ.get(MANIFEST_PATH_VARIABLE, "").split(":") if p]
    root = project_root()
    if root is not None:
        dirs.append(root / "agents" / "manifests")
    return dirs


def discover_manifests(dirs: list[Path]) -> dict[str, AgentManifest]:
    """All manifests by name; the first directory wins when two declare the same name."""
    found: dict[str, AgentManifest] = {}
    for directory in dirs:
        for path in sorted(directory.glob("*.toml")):
            manifest = parse_manifest(path)
            found.setdefault(manifest.name, manifest)
    return found
