"""Locked, hashed requirements per agent: agents/manifests/NAME.lock beside NAME.toml, made by
pip-tools (`collector lock`) from the manifest's requirements and the third-party dependencies
of the agent's own packages. An environment or image made from a lock installs exactly those
versions and files (pip --require-hashes), so the same manifest builds the same environment
next month; environment and image caches are keyed on the lock's content.

The lock's first line records a key of its inputs: when the manifest or a package's
dependencies change, the lock is stale and nothing is built from it until `collector lock`
makes it again (a test keeps the shipped locks current). A manifest without a lock (a GPU
agent whose package index this host cannot reach, a user's own) is installed unlocked, as
before, and says so."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
import tempfile
import tomllib
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.pythons import run_python, safe_path

KEY_PREFIX = "# fwbench-lock-inputs: "
LOCAL_PREFIX = "fwbench-"  # the project's own distributions: installed from source, unlocked


class LockState(StrEnum):
    CURRENT = "current"
    STALE = "stale"  # the inputs changed since the lock was made
    MISSING = "missing"


class LockError(RuntimeError):
    """A lock could not be made or used; the message says why and what to run."""


def lock_path(manifest: AgentManifest) -> Path:
    return manifest.path.with_suffix(".lock")


def _dependencies(package: Path) -> list[str]:
    project = tomllib.loads((package / "pyproject.toml").read_text("utf-8"))["project"]
    return [str(d) for d in project.get("dependencies", [])]


def lock_inputs(manifest: AgentManifest) -> list[str]:
    """What the lock resolves: the manifest's requirements, then its packages' third-party
    dependencies (the packages themselves are the project's, installed from source)."""
    inputs = list(manifest.requirements)
    for package in manifest.local_packages:
        for requirement in _dependencies(package):
            if not requirement.startswith(LOCAL_PREFIX) and requirement not in inputs:
                inputs.append(requirement)
    return inputs


def inputs_key(manifest: AgentManifest, python: tuple[int, int] | None = None) -> str:
    """The key of what a lock resolves, for this Python's version unless `python` is given."""
    version = list(python or sys.version_info[:2])
    blob = json.dumps([lock_inputs(manifest), manifest.pip_args, version])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _made_for(manifest: AgentManifest, first_line: str) -> tuple[int, int] | None:
    """The Python version a stale lock's key matches, when only the version differs."""
    for minor in range(8, 20):
        if first_line == KEY_PREFIX + inputs_key(manifest, (3, minor)):
            return 3, minor
    return None


def lock_state(manifest: AgentManifest) -> LockState:
    path = lock_path(manifest)
    if not path.is_file():
        return LockState.MISSING
    first = path.read_text("utf-8").partition("\n")[0]
    return LockState.CURRENT if first == KEY_PREFIX + inputs_key(manifest) else LockState.STALE


def current_lock(manifest: AgentManifest) -> Path | None:
    """The lock to install from; None when the manifest has none. Raises LockError when the
    lock is stale (installing it would not give what the manifest asks for)."""
    state = lock_state(manifest)
    if state == LockState.STALE:
        first = lock_path(manifest).read_text("utf-8").partition("\n")[0]
        made_for = _made_for(manifest, first)
        if made_for is not None:
            here = ".".join(map(str, sys.version_info[:2]))
            raise LockError(
                f"{lock_path(manifest)} was made for Python {made_for[0]}.{made_for[1]} and "
                f"this collector runs {here}: run the collector with that Python, or "
                f"`collector lock {manifest.name}` under this one"
            )
        raise LockError(
            f"{lock_path(manifest)} is stale (the manifest or its packages' dependencies "
            f"changed); run `collector lock {manifest.name}`"
        )
    return lock_path(manifest) if state == LockState.CURRENT else None


def write_lock(manifest: AgentManifest, report: Callable[[str], None] = lambda _: None) -> Path:
    """Resolves and hashes with pip-tools (this host's pip configuration and indexes; no index
    address is written into the lock). Blocks for a minute or more. Raises LockError."""
    if importlib.util.find_spec("piptools") is None:
        raise LockError("`collector lock` needs pip-tools: pip install 'fwbench[lock]'")
    target = lock_path(manifest)
    report(f"locking {manifest.name} -> {target.name}")
    with tempfile.TemporaryDirectory(prefix="fwbench-lock-") as folder:
        source, output = Path(folder) / f"{manifest.name}.in", Path(folder) / "out.lock"
        source.write_text("".join(f"{line}\n" for line in lock_inputs(manifest)))
        done = run_python(  # in the lock's own temporary folder, not the caller's
            [*_compile_command(manifest), "--output-file", str(output), str(source)],
            Path(folder),
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = " / ".join(done.stderr.strip().splitlines()[-3:])
            raise LockError(f"locking {manifest.name} failed: {tail}")
        body = output.read_text("utf-8").replace(str(source.parent) + "/", "")
    target.write_text(f"{KEY_PREFIX}{inputs_key(manifest)}\n{body}", "utf-8")
    return target


def _compile_command(manifest: AgentManifest) -> list[str]:
    command = safe_path(sys.executable, "-m", "piptools", "compile", "--quiet")
    command += ["--generate-hashes"]
    command += ["--allow-unsafe", "--strip-extras", "--no-emit-index-url"]
    command += ["--no-emit-find-links", "--no-emit-trusted-host", "--newline", "LF"]
    if manifest.pip_args:
        command += ["--pip-args", " ".join(manifest.pip_args)]
    return command
