"""Per-agent virtual environments for the local launcher, made from a manifest on first use
and cached. With a lock (locks.py) the environment is exactly the lock's, installed with
hashes checked, and the cache key is the lock's content; without one, the key covers what pip
would install (requirements, pip arguments). The Python version is in both. The agent's own
packages are rebuilt when their sources change."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fwbench.collector.agents.locks import current_lock
from fwbench.collector.agents.manifest import AgentManifest

ENV_DIR_VARIABLE = "FWBENCH_ENV_DIR"
_MARKER = "fwbench-env.json"
_SKIP_PARTS = {"__pycache__", "build", ".egg-info", ".mypy_cache", ".pytest_cache"}


class EnvironmentBuildError(RuntimeError):
    """pip or venv failed; the message points at the log."""


def env_root() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fwbench" / "envs"
    return Path(os.environ.get(ENV_DIR_VARIABLE, default))


def requirements_key(manifest: AgentManifest) -> str:
    """Names the environment: what is installed into it (raises LockError for a stale lock)."""
    lock = current_lock(manifest)
    installs: object = lock.read_text("utf-8") if lock else manifest.requirements
    blob = json.dumps([installs, manifest.pip_args, sys.version_info[:2]])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def sources_key(manifest: AgentManifest) -> str:
    digest = hashlib.sha256()
    for package in manifest.local_packages:
        for path in sorted(package.rglob("*")):
            relative = path.relative_to(package)
            if path.is_file() and not any(
                part in _SKIP_PARTS or part.endswith(".egg-info") for part in relative.parts
            ):
                digest.update(str(relative).encode())
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class AgentEnvironment:
    manifest: AgentManifest
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def log(self) -> Path:
        return self.path / "install.log"

    def state(self) -> str:
        """ "ready", "stale" (agent sources changed) or "missing"."""
        marker = self.path / _MARKER
        if not marker.is_file() or not self.python.exists():
            return "missing"
        recorded = json.loads(marker.read_text())
        return "ready" if recorded.get("sources") == sources_key(self.manifest) else "stale"

    def ensure(self, report: Callable[[str], None] = lambda _: None) -> None:
        """Creates or refreshes the environment; blocks (minutes on first use). Safe to call
        from several threads and collectors at once: they take turns on a lock file per
        environment and, to build, on one for all of them: pip builds the agents' own
        packages inside their source folders (build/), which two builds at once would share."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(f"{self.path}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if self.state() == "ready":
                return
            with open(self.path.parent / ".builds.lock", "w") as builds:
                fcntl.flock(builds, fcntl.LOCK_EX)
                self._ensure_locked(report)

    def _ensure_locked(self, report: Callable[[str], None]) -> None:
        state = self.state()
        if state == "ready":
            return
        local = [str(p) for p in self.manifest.local_packages]
        pip = [str(self.python), "-m", "pip", "install", "--no-build-isolation"]
        lock = current_lock(self.manifest)
        if state == "missing":
            report(f"creating the {self.manifest.name} environment (first use, minutes)")
            self._run([sys.executable, "-m", "venv", "--clear", str(self.path)])
            self._run([str(self.python), "-m", "pip", "install", "setuptools>=68", "wheel"])
            if lock is None:
                self._run([*pip, *self.manifest.pip_args, *self.manifest.requirements, *local])
            else:
                locked = ["--require-hashes", "--no-deps", "-r", str(lock)]
                self._run([*pip, *self.manifest.pip_args, *locked])
                self._run([*pip, "--no-deps", *local])
                self._run([str(self.python), "-m", "pip", "check"])
        elif lock is not None:
            report(f"reinstalling the {self.manifest.name} agent packages (sources changed)")
            self._run([*pip, "--force-reinstall", "--no-deps", *local])
        else:
            report(f"reinstalling the {self.manifest.name} agent packages (sources changed)")
            self._run([*pip, "--force-reinstall", "--no-deps", *local])
            self._run([*pip, *self.manifest.pip_args, *local])  # picks up new dependencies
        record: dict[str, str | None] = {"manifest": str(self.manifest.path)}
        record["sources"] = sources_key(self.manifest)
        record["lock"] = str(lock) if lock else None
        (self.path / _MARKER).write_text(json.dumps(record))

    def _run(self, command: list[str]) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("a") as log:
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            done = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise EnvironmentBuildError(
                f"building the {self.manifest.name} environment failed "
                f"({command[2] if len(command) > 2 else command[0]} exited {done.returncode}); "
                f"see {self.log}"
            )


def environment_for(manifest: AgentManifest, root: Path | None = None) -> AgentEnvironment:
    base = root or env_root()
    return AgentEnvironment(manifest, base / f"{manifest.name}-{requirements_key(manifest)}")
