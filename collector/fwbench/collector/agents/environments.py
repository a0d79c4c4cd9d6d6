"""Per-agent virtual environments for the local launcher, made from a manifest on first use
and cached. With a lock (locks.py) the environment is exactly the lock's, installed with
hashes checked, and the cache key is the lock's content; without one, the key covers what pip
would install (requirements, pip arguments). The Python version is in both. The agent's own
packages are rebuilt when their sources change. uv makes and fills them, told the host's pip
configuration (installer.py).

Every Python here runs isolated (`-I`) in the environment's own folder (pythons.py), so that
nothing in the caller's folder (a pip.py, a venv.py) runs instead; uv runs there too, without
the caller's PYTHON* variables. An environment is marked ready (its marker, fwbench-env.json)
only after the installs succeeded and the environment imports the agent runtime and loads the
plugin's entry point (probes/plugin_check.py). A build that failed leaves a note
(fwbench-env.failed) that `collector agents` shows; a marker written before these checks
existed is checked again (without importing the framework) before it counts, and an
environment that fails that check is made again. An environment whose content (content_key) a
ready one already holds is made as its copy (env_copies.py), then checked the same way."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from fwbench.collector.agents.agent_sources import copy_sources, sources_key
from fwbench.collector.agents.env_copies import FAILED, MARKER, copy_twin
from fwbench.collector.agents.installer import (
    check_command,
    install_command,
    pip_configuration,
    uv_variables,
    venv_command,
)
from fwbench.collector.agents.locks import current_lock
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.pythons import isolated, run_python
from fwbench.collector.agents.scratch import scratch_folder
from fwbench.collector.places import cache_path
from fwbench.spec import settings

ENV_DIR_VARIABLE = settings.ENV_DIR
CHECK = Path(__file__).with_name("probes") / "plugin_check.py"
CHECK_VERSION = 1  # recorded in the marker: the environment passed plugin_check.py
CHECK_TIMEOUT_SECONDS = 600.0  # a framework's first import on a cold file system can be slow
_LOCAL = ("--no-build-isolation",)  # the agent's packages build with the environment's setuptools


class EnvironmentBuildError(RuntimeError):
    """pip or venv failed; the message points at the log."""


def env_root() -> Path:
    default = cache_path("envs")
    return Path(os.environ.get(ENV_DIR_VARIABLE, default)).absolute()  # Pythons run elsewhere


def requirements_key(manifest: AgentManifest) -> str:
    """Names the environment: what is installed into it (raises LockError for a stale lock)."""
    lock = current_lock(manifest)
    installs: object = lock.read_text("utf-8") if lock else manifest.requirements
    blob = json.dumps([installs, manifest.pip_args, sys.version_info[:2], *_build(manifest)])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _build(manifest: AgentManifest) -> list[object]:
    """The build requirements (and the build's variables, where set) as a key's last items, or
    nothing: the keys of manifests without them stay what they were."""
    found: list[object] = [list(manifest.build_requirements)] if manifest.build_requirements else []
    return [*found, dict(sorted(manifest.build_env.items()))] if manifest.build_env else found


def content_key(manifest: AgentManifest, sources: str) -> str:
    """What an environment holds, whichever agent it is for: the installs (a lock's lines
    without its comments, which name the lock's own file), pip's arguments, the Python version
    and the agent's packages and their sources (`sources`: sources_key's digest). Agents with
    the same content differ only in their switches (tf-mkl and tf-eigen), so one's environment
    is a copy of the other's (env_copies.py)."""
    lock = current_lock(manifest)
    installs: object = manifest.requirements
    if lock:
        lines = (line.strip() for line in lock.read_text("utf-8").splitlines())
        installs = [line for line in lines if line and not line.startswith("#")]
    packages = [package.name for package in manifest.local_packages]
    blob = json.dumps(
        [installs, manifest.pip_args, sys.version_info[:2], packages, *_build(manifest)]
    )
    return hashlib.sha256(f"{blob}{sources}".encode()).hexdigest()[:12]


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

    @property
    def folder(self) -> Path:
        """The working folder of every Python run in it, the agent's too: its own."""
        return self.path

    def state(self) -> str:
        """ "ready", "stale" (agent sources changed), "missing", "failed" (the last build
        failed) or "broken" (made before its import was checked, and it does not import)."""
        return self.status()[0]

    def status(self) -> tuple[str, str]:
        """(state, why: the failure or the check's line, else "")."""
        failed = self.path / FAILED
        if failed.is_file():
            return "failed", failed.read_text(errors="replace").strip()
        marker = self.path / MARKER
        if not marker.is_file() or not self.python.exists():
            return "missing", ""
        recorded = json.loads(marker.read_text())
        if recorded.get("sources") != sources_key(self.manifest):
            return "stale", ""
        if recorded.get("checked") != CHECK_VERSION:
            problem = self.check(locate=True)
            if problem:
                return "broken", problem
        return "ready", ""

    def check(self, locate: bool = False) -> str:
        """What this environment lacks to run its agent ("" when nothing): the runtime and the
        plugin imported there (`locate`: only found, importing no framework)."""
        command = isolated(self.python, str(CHECK), self.manifest.plugin)
        command += ["--locate"] if locate else []
        variables = {**os.environ, **self.manifest.env}  # the agent's own switches
        try:
            done = run_python(
                command,
                self.path,
                env=variables,
                capture_output=True,
                text=True,
                timeout=CHECK_TIMEOUT_SECONDS,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return str(error)
        if done.returncode == 0:
            return ""
        lines = (done.stdout or done.stderr).strip().splitlines()
        return lines[-1] if lines else f"the check exited {done.returncode}"

    def ensure(self, report: Callable[[str], None] = lambda _: None) -> None:
        """Creates or refreshes the environment; blocks (minutes on first use). Safe to call
        from several threads and collectors at once: they take turns on a lock file per
        environment; different environments build at once (each from its own copy of the
        agent's packages: copy_sources)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{self.path}.lock"):
            if self.state() == "ready" and not self._recheck():
                return
            try:
                with tempfile.TemporaryDirectory(prefix=f"fwbench-{self.manifest.name}-") as copy:
                    self._ensure_locked(
                        report, copy_sources(self.manifest.local_packages, Path(copy))
                    )
            except EnvironmentBuildError as error:
                if self.path.is_dir():
                    (self.path / FAILED).write_text(f"{error}\n")
                raise

    def _recheck(self) -> str:
        """ "" when the marker records the full check; a marker from before that check is
        checked now (importing the plugin) and, when it passes, recorded; else what fails."""
        marker = self.path / MARKER
        record = json.loads(marker.read_text())
        if record.get("checked") == CHECK_VERSION:
            return ""
        problem = self.check()
        if not problem:
            self._mark({**record, "checked": CHECK_VERSION})
        return problem

    def _mark(self, record: dict[str, object]) -> None:
        """Writes the marker whole, then renames it: others read it without the lock."""
        partial = self.path / f"{MARKER}.{os.getpid()}.tmp"
        partial.write_text(json.dumps(record))
        partial.replace(self.path / MARKER)

    def _ensure_locked(self, report: Callable[[str], None], packages: list[Path]) -> None:
        """Makes or refreshes the environment, installing the agent's packages from
        `packages` (copies of manifest.local_packages)."""
        state, why = self.status()
        if state == "ready":
            why = self._recheck()
            if not why:
                return
            state = "broken"
        local = [str(p) for p in packages]
        python = self.python
        lock = current_lock(self.manifest)
        sources = sources_key(self.manifest)  # read once: the key and the marker
        content = content_key(self.manifest, sources)
        twin = copy_twin(self.path, content, report) if state == "missing" else None
        if twin is not None:
            with self.log.open("a") as log:
                log.write(f"copied from {twin}, whose content is the same (env_copies.py)\n")
        elif state != "stale":
            name = self.manifest.name
            if state == "missing":
                report(f"creating the {name} environment (first use, minutes)")
            elif state == "failed":
                report(f"building the {name} environment again (its last build failed)")
            else:
                report(f"making the {name} environment again: it cannot run its agent ({why})")
            shutil.rmtree(self.path, ignore_errors=True)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._run(venv_command(self.path))
            if self.manifest.build_requirements:  # an sdist in the lock builds with them
                self._run(install_command(python, *self.manifest.build_requirements))
            pip_args = self.manifest.pip_args
            if lock is None:
                requirements = [*pip_args, *self.manifest.requirements, *local]
                self._run(
                    install_command(python, *_LOCAL, *requirements), self.manifest.build_variables
                )
            else:
                locked = ["--require-hashes", "--no-deps", "-r", str(lock)]
                self._run(
                    install_command(python, *_LOCAL, *pip_args, *locked),
                    self.manifest.build_variables,
                )
                self._run(install_command(python, *_LOCAL, "--no-deps", *local))
                self._run(check_command(python))
        else:
            report(f"reinstalling the {self.manifest.name} agent packages (sources changed)")
            self._run(install_command(python, *_LOCAL, "--reinstall", "--no-deps", *local))
            if lock is None:  # picks up new dependencies
                self._run(install_command(python, *_LOCAL, *self.manifest.pip_args, *local))
        (self.path / MARKER).unlink(missing_ok=True)  # not ready until checked
        problem = self.check()
        if problem:
            raise EnvironmentBuildError(
                f"the {self.manifest.name} environment was installed but cannot run its agent "
                f"({problem}); see {self.log}"
            )
        record: dict[str, object] = {"manifest": str(self.manifest.path)}
        record["sources"] = sources
        record["content"] = content
        record["lock"] = str(lock) if lock else None
        record["checked"] = CHECK_VERSION
        self._mark(record)

    def _run(self, command: list[str], build_env: Mapping[str, str] | None = None) -> None:
        """One step of the build (a uv command: installer.py), logged, in the environment's
        own folder (with `build_env`: the variables an sdist's build reads)."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        env = {**uv_variables(pip_configuration()), **(build_env or {})}
        temporary = scratch_folder("uv")  # uv leaves lock files in its TMPDIR
        env.update(TMPDIR=str(temporary), TMP=str(temporary), TEMP=str(temporary))
        with self.log.open("a") as log:
            for name, value in (build_env or {}).items():
                log.write(f"$ export {name}={value!r}\n")
            log.write(f"$ {' '.join(command)}\n")
            log.flush()
            try:
                done = run_python(command, self.path, stdout=log, stderr=subprocess.STDOUT, env=env)
            finally:
                shutil.rmtree(temporary, ignore_errors=True)
        if done.returncode != 0:
            step = " ".join(["uv", *command[1 : 3 if command[1] == "pip" else 2]])
            raise EnvironmentBuildError(
                f"building the {self.manifest.name} environment failed "
                f"({step} exited {done.returncode}); see {self.log}"
            )


def environment_for(manifest: AgentManifest, root: Path | None = None) -> AgentEnvironment:
    base = root or env_root()
    return AgentEnvironment(manifest, base / f"{manifest.name}-{requirements_key(manifest)}")
