"""The wheels an agent image installs from, made on the host (`pip wheel`, with the host's pip
configuration and mirrors), so that image builds need no index and no network.

Cached under ~/.cache/fwbench/wheelhouse (or $FWBENCH_WHEELHOUSE):
- runtime-KEY/: the third-party wheels of the agent runtime (KEY: the runtime packages'
  pyproject.toml files and the Python version);
- agent-KEY/: everything an agent needs: the files of its lock (agents/locks.py; KEY: the
  lock's content), or without a lock, resolved in one pip run from the manifest's
  requirements and local packages, as the local launcher's environment is (KEY: the
  manifest's requirements and pip arguments, every local package's pyproject.toml, Python);
- local/NAME-DIGEST/: the agent's own packages (protocol, runtime, plugin), rebuilt when
  their sources change, with a fixed SOURCE_DATE_EPOCH so the same sources give the same bytes
  (and so the same image layers).

`stage_context` lays these out as a build context: runtime/, agent/ and fwbench/, each with a
pinned requirements.txt (see dockerfile.py). The agent's own packages come last and alone, so
editing them rebuilds a layer of kilobytes, not the framework's."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from fwbench.collector.agents.agent_sources import copy_sources, sources_key
from fwbench.collector.agents.locks import current_lock
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.pythons import run_python, safe_path
from fwbench.collector.places import cache_path
from fwbench.spec import settings

WHEELHOUSE_VARIABLE = settings.WHEELHOUSE
IMAGE_PYTHON = (3, 11)  # the Python of every base image (bookworm's, python:3.11, deadsnakes)
RUNTIME_DISTRIBUTIONS = frozenset({"fwbench-spec", "fwbench-agent-runtime"})
SOURCE_DATE_EPOCH = "315532800"  # 1980-01-01, the earliest date a zip file can hold
_DONE = "complete.json"


class WheelhouseError(RuntimeError):
    """pip could not make the wheels; the message points at the log."""


def wheelhouse_root() -> Path:
    return Path(os.environ.get(WHEELHOUSE_VARIABLE, cache_path("wheelhouse"))).absolute()


def distribution_name(package: Path) -> str:
    """The `[project] name` of a local package, normalized (PEP 503)."""
    name = tomllib.loads((package / "pyproject.toml").read_text("utf-8"))["project"]["name"]
    return normalize(name)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_pin(wheel: Path) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name."""
    name, version = wheel.name.split("-")[:2]
    return normalize(name), version


@dataclass(frozen=True)
class AgentWheels:
    """The wheels of one agent, split by the image layer that installs them."""

    runtime: tuple[Path, ...]  # the agent runtime's third-party dependencies
    agent: tuple[Path, ...]  # every third-party wheel the agent needs (framework included)
    own: tuple[Path, ...]  # the agent's local packages: protocol, runtime, plugin

    def pins(self) -> list[str]:
        """name==version of everything the agent layer and the fwbench layer install."""
        return sorted(f"{n}=={v}" for n, v in map(wheel_pin, (*self.agent, *self.own)))

    def version_of(self, requirement: str) -> str:
        """Version of the wheel that provides `requirement`'s project, or ""."""
        project = normalize(re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0])
        return next((v for n, v in map(wheel_pin, self.agent) if n == project), "")


def _key(*parts: object) -> str:
    blob = json.dumps([*(str(p) for p in parts), sys.version_info[:2]])
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _pyprojects(packages: Iterable[Path]) -> list[str]:
    return [(p / "pyproject.toml").read_text("utf-8") for p in packages]


def _pip_wheel(
    out: Path,
    arguments: list[str],
    report: Callable[[str], None],
    local: Sequence[Path] = (),
    build_env: Mapping[str, str] | None = None,
) -> None:
    """Fills `out` once (a marker records completion); later calls are free. Blocks for
    minutes on first use; concurrent callers take turns on a lock. `local` packages are built
    from copies (copy_sources), after `arguments`; `build_env`: the variables an sdist's build
    reads (the manifest's [install] build_env)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(f"{out}.lock"), tempfile.TemporaryDirectory(prefix="fwbench-wheels-") as copy:
        if (out / _DONE).is_file():
            return
        report(f"making wheels in {out} (first use, minutes)")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir()
        log = Path(f"{out}.log")
        command = safe_path(sys.executable, "-m", "pip", "wheel", "--wheel-dir", str(out))
        command += [*arguments, *map(str, copy_sources(local, Path(copy)))]
        env = {**os.environ, **(build_env or {}), "SOURCE_DATE_EPOCH": SOURCE_DATE_EPOCH}
        with log.open("w") as stream:
            stream.write(f"$ {' '.join(command)}\n")
            stream.flush()
            # In the (new, empty) wheel folder: nothing of the caller's folder is imported.
            done = run_python(command, out, stdout=stream, stderr=subprocess.STDOUT, env=env)
        if done.returncode != 0:
            raise WheelhouseError(f"pip wheel exited {done.returncode}; see {log}")
        (out / _DONE).write_text(json.dumps([*arguments, *map(str, local)]))


def _local_wheel(package: Path, report: Callable[[str], None]) -> Path:
    digest = sources_key_of(package)
    out = wheelhouse_root() / "local" / f"{package.name}-{digest}"
    _pip_wheel(out, ["--no-deps"], report, [package])
    return next(out.glob("*.whl"))


def sources_key_of(package: Path) -> str:
    """Digest of one local package's sources (the local launcher's rule, per package)."""
    stand_in = AgentManifest(
        name="",
        plugin="",
        variant="",
        description="",
        path=package,
        requirements=(),
        pip_args=(),
        local_packages=(package,),
    )
    return sources_key(stand_in)


def _third_party(folder: Path, local: set[str]) -> list[Path]:
    return sorted(w for w in folder.glob("*.whl") if wheel_pin(w)[0] not in local)


def agent_wheels(manifest: AgentManifest, report: Callable[[str], None]) -> AgentWheels:
    """Makes (or finds) every wheel the agent's image needs. Raises WheelhouseError."""
    if sys.version_info[:2] != IMAGE_PYTHON:
        raise WheelhouseError(
            f"image wheels are made with Python {'.'.join(map(str, IMAGE_PYTHON))}, the "
            f"images' Python; this collector runs on {sys.version.split()[0]}"
        )
    names = {p: distribution_name(p) for p in manifest.local_packages}
    runtime_packages = [p for p, n in names.items() if n in RUNTIME_DISTRIBUTIONS]
    root = wheelhouse_root()
    runtime_dir = root / f"runtime-{_key(*_pyprojects(runtime_packages))}"
    _pip_wheel(runtime_dir, [], report, runtime_packages)
    lock = current_lock(manifest)
    build = sorted(manifest.build_env.items())  # in the keys only where set: others unchanged
    if lock is None:
        parts = (manifest.requirements, manifest.pip_args, *_pyprojects(manifest.local_packages))
        agent_dir = root / f"agent-{_key(*parts, *([build] if build else []))}"
        requirements = [*manifest.pip_args, *manifest.requirements]
        _pip_wheel(
            agent_dir, requirements, report, manifest.local_packages, manifest.build_variables
        )
    else:  # exactly the lock's files, hashes checked; the agent's own packages come below
        key = _key(lock.read_text("utf-8"), manifest.pip_args, *([build] if build else []))
        agent_dir = root / f"agent-{key}"
        locked = ["--require-hashes", "--no-deps", "-r", str(lock)]
        _pip_wheel(agent_dir, [*manifest.pip_args, *locked], report, (), manifest.build_variables)
    local_names = set(names.values())
    return AgentWheels(
        runtime=tuple(_third_party(runtime_dir, local_names)),
        agent=tuple(_third_party(agent_dir, local_names)),
        own=tuple(_local_wheel(p, report) for p in manifest.local_packages),
    )


def stage_context(wheels: AgentWheels, context: Path) -> None:
    """Lays out runtime/, agent/ and fwbench/ under `context` (emptied first), each with the
    wheels (hard links where possible) and a requirements.txt pinning every one of them."""
    shutil.rmtree(context, ignore_errors=True)
    layers = (("runtime", wheels.runtime), ("agent", wheels.agent), ("fwbench", wheels.own))
    for stage, files in layers:
        folder = context / stage
        folder.mkdir(parents=True)
        for wheel in files:
            _link(wheel, folder / wheel.name)
        pins = sorted(f"{name}=={version}" for name, version in map(wheel_pin, files))
        (folder / "requirements.txt").write_text("".join(f"{pin}\n" for pin in pins))


def _link(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
