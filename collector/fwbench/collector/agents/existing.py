"""Agents in Python environments the collector did not make (`collector run --python`): a
cluster module, a conda environment, a vendor image's interpreter, where the framework is
already installed and often nothing can be downloaded.

The collector installs nothing into such an environment. The agent's own packages (the spec,
the runtime and the plugin: pure Python) are built once into an overlay folder in the
collector's cache and put on the agent's PYTHONPATH; everything else (the framework and the
runtime's dependencies: grpcio, protobuf, prometheus-client, ...) must already be there.
Before an agent starts, a probe run with that interpreter (probes/environment_probe.py) checks
the Python version, every dependency's installed version against the agent packages'
requirements, and that the plugin constructs there (importing its framework); anything
missing is refused with what to install and how. The overlay's pip runs in the collector's
interpreter, and the probe and the agent in the given one, with -P in a folder of their own
(pythons.py): never importing from the folder the collector was started in."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib.metadata import distributions
from pathlib import Path
from typing import Any

from filelock import FileLock
from packaging.requirements import Requirement

from fwbench.collector.agents.agent_sources import copy_sources, sources_key
from fwbench.collector.agents.environments import EnvironmentBuildError, env_root
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.pythons import run_python, safe_path
from fwbench.collector.agents.specs import Instance

PROBE = Path(__file__).with_name("probes") / "environment_probe.py"
PROBE_TIMEOUT_SECONDS = 300.0  # a framework's first import on a cold file system can be slow
MIN_PYTHON = (3, 11)


class EnvironmentUnsuitable(ValueError):
    """An existing environment that cannot run the agent; the message says what to install."""


def parse_pythons(values: list[str], declared: dict[str, AgentManifest]) -> dict[str, str]:
    """`--python PATH` (every local agent) and `--python AGENT=PATH` (one agent) -> {agent or
    "": absolute path}; raises EnvironmentUnsuitable for an unknown agent or a missing file."""
    found: dict[str, str] = {}
    for value in values:
        name, sep, path = value.rpartition("=") if "=" in value else ("", "", value)
        if sep and name not in declared:
            raise EnvironmentUnsuitable(
                f"--python {value}: unknown agent {name!r}; declared: {', '.join(declared)}"
            )
        interpreter = Path(path).expanduser()
        if not interpreter.is_file() or not os.access(interpreter, os.X_OK):
            raise EnvironmentUnsuitable(f"--python {value}: {path} is not an executable file")
        if name in found:
            raise EnvironmentUnsuitable(f"--python given twice for {name or 'every agent'}")
        found[name] = str(interpreter.absolute())
    return found


@dataclass(frozen=True)
class ExistingEnvironment:
    """The local launcher's view of an environment it did not make (cf. AgentEnvironment)."""

    manifest: AgentManifest
    python: Path

    @property
    def path(self) -> Path:
        return self.python

    @property
    def folder(self) -> Path:
        """The working folder of the probe and the agent: the overlay, made by ensure()."""
        return self.overlay

    @property
    def overlay(self) -> Path:
        return env_root() / "overlays" / f"{self.manifest.name}-{sources_key(self.manifest)}"

    def variables(self) -> dict[str, str]:
        """What the agent's process needs on top of the manifest's switches."""
        return {"PYTHONPATH": agent_pythonpath(str(self.overlay))}

    def ensure(self, report: Any = lambda _: None) -> None:
        """Builds the overlay if needed, then checks the interpreter (cached per process)."""
        self._ensure_overlay(report)
        switches = tuple(sorted(self.manifest.env.items()))
        facts = probe(str(self.python), str(self.overlay), self.manifest.plugin, switches)
        problems, install = _problems(self.manifest, self.overlay, facts)
        if problems:
            raise EnvironmentUnsuitable(_refusal(facts, self.manifest.name, problems, install))

    def _ensure_overlay(self, report: Any) -> None:
        marker = self.overlay / ".complete"
        if marker.exists():
            return
        self.overlay.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(f"{self.overlay}.lock"):
            if marker.exists():
                return
            report(f"building the {self.manifest.name} agent packages for an existing Python")
            command = safe_path(sys.executable, "-m", "pip", "install", "--quiet", "--no-deps")
            command += ["--no-build-isolation", "--upgrade", "--target", str(self.overlay)]
            with tempfile.TemporaryDirectory(prefix=f"fwbench-{self.manifest.name}-") as copy:
                command += map(str, copy_sources(self.manifest.local_packages, Path(copy)))
                done = run_python(command, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise EnvironmentBuildError(
                    f"building the {self.manifest.name} agent packages failed: "
                    f"{done.stderr.strip()[-2000:]}"
                )
            marker.write_text(json.dumps({"manifest": str(self.manifest.path)}))


def agent_pythonpath(overlay: str) -> str:
    """The overlay, then the collector's own PYTHONPATH (packages carried as wheels to a
    host without an index are often there: `pip install --target DIR`)."""
    return os.pathsep.join(p for p in (overlay, os.environ.get("PYTHONPATH", "")) if p)


def agent_requirements(overlay: Path) -> list[Requirement]:
    """What the agent's own packages require, less themselves (they are in the overlay)."""
    found = list(distributions(path=[str(overlay)]))
    own = {d.metadata["Name"].lower() for d in found}
    wanted: dict[str, Requirement] = {}
    for dist in found:
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate():
                continue
            if requirement.name.lower() not in own:
                wanted.setdefault(requirement.name.lower(), requirement)
    return sorted(wanted.values(), key=lambda r: r.name.lower())


@cache
def probe(
    python: str, overlay: str, plugin: str, switches: tuple[tuple[str, str], ...]
) -> dict[str, Any]:
    """What `python` offers an agent of `plugin` with the manifest's environment `switches`
    (probes/environment_probe.py); asked once per collector."""
    names = [r.name for r in agent_requirements(Path(overlay))]
    # The agent's own PYTHONPATH, so that the probe sees what the agent will.
    variables = {**os.environ, **dict(switches), "PYTHONPATH": agent_pythonpath(overlay)}
    request = json.dumps({"distributions": names, "plugin": plugin})
    try:
        done = run_python(
            safe_path(python, str(PROBE), request),
            Path(overlay),
            capture_output=True,
            text=True,
            env=variables,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        message = f"{python} could not be asked what it offers: {error}"
        raise EnvironmentUnsuitable(message) from error
    try:
        facts: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise EnvironmentUnsuitable(
            f"{python} could not run the environment probe (exit {done.returncode}): {tail}"
        ) from None
    return facts


def _problems(
    manifest: AgentManifest, overlay: Path, facts: dict[str, Any]
) -> tuple[list[str], list[str]]:
    """(what is wrong, requirements to install) for the probe's answer."""
    version = tuple(int(part) for part in str(facts["version"]).split(".")[:2])
    if version < MIN_PYTHON:
        return [f"Python {facts['version']} is too old: the agent runtime needs 3.11 or later"], []
    problems, install = [], []
    installed = facts["distributions"]
    for requirement in agent_requirements(overlay):
        have = installed.get(requirement.name)
        if have is None:
            problems.append(f"{requirement} is not installed")
        elif requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
            problems.append(f"{requirement.name} {have} does not satisfy {requirement}")
        else:
            continue
        install.append(str(requirement))
    if not problems and facts.get("plugin_error"):
        problems.append(f"the {manifest.plugin} plugin cannot start there: {facts['plugin_error']}")
        install = list(manifest.requirements)  # what the manifest's own environment gets
    return problems, install


def _refusal(facts: dict[str, Any], name: str, problems: list[str], install: list[str]) -> str:
    python = facts["python"]
    how = ""
    if install:
        packages = " ".join(shlex.quote(r) for r in install)
        how = (
            f" Install them there: {shlex.quote(python)} -m pip install {packages} (on a host "
            "without a package index: pip download them elsewhere, carry the wheels, then "
            "pip install --no-index --find-links DIR)."
        )
    return (
        f"{name} cannot run in {python} (Python {facts['version']}): {'; '.join(problems)}."
        f"{how} The collector installs nothing into an environment it did not make."
    )


def check_pythons(
    pythons: dict[str, str],
    instances: Sequence[Instance],
    declared: dict[str, AgentManifest],
    report: Any = lambda _: None,
) -> None:
    """Before a run starts: every local agent given an existing interpreter can run in it
    (EnvironmentUnsuitable otherwise, saying what to install); a per-agent --python names an
    agent of the run."""
    names = {instance.agent for instance in instances if not instance.attached}
    for name in pythons:
        if name and name not in names:
            raise EnvironmentUnsuitable(
                f"--python {name}=...: {name} is not among the agents run here "
                f"({', '.join(sorted(names)) or 'none started by the collector'})"
            )
    for name in sorted(names):
        python = pythons.get(name) or pythons.get("")
        if python:
            ExistingEnvironment(declared[name], Path(python)).ensure(report)
