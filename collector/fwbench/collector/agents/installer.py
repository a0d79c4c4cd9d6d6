"""The commands that make and fill an agent environment: uv (Astral's installer, a dependency
of the collector), with pip's meaning. uv makes the virtual environment with pip, setuptools
and wheel in it (`--seed`: the user's own `pip install` there works, and the agent's packages
build with its setuptools), installs in parallel from its cache (hard links) and compiles the
modules as pip does, so an agent's first start reads compiled files: the TensorFlow lock, 43
packages, in 15 s from a warm cache where pip took 60 s (AMD EPYC family 25, 2 vCPUs,
2026-12-07).

uv reads no pip configuration, so the host's is handed to it: what `pip config list` shows
for the collector's interpreter (files and PIP_* variables) that decides where packages come
from (index-url, extra-index-url, find-links, no-index, trusted-host, constraint, cert,
timeout). Local folders that do not exist are left out, as pip leaves them out with a warning.
pip looks at every index for a pinned version; so does uv here (`unsafe-best-match`): a lock's
hashes, not the index's order, decide which file is installed."""

from __future__ import annotations

import ast
import functools
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlparse

from fwbench.collector.agents.pythons import run_python, safe_path

# pip's configuration keys that say where packages come from, as uv's options.
_LISTS = {
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "trusted-host": "--allow-insecure-host",
}
_SECTIONS = ("global", "install", ":env:")  # pip's own order: later ones win


def uv() -> str:
    """The uv binary the collector's own uv package carries."""
    from uv import find_uv_bin

    return str(find_uv_bin())


@functools.cache
def pip_configuration() -> Mapping[str, str]:
    """`pip config list` of the collector's interpreter, one value per key (the later section
    winning); empty where pip is not there or says nothing."""
    try:
        done = run_python(
            safe_path(sys.executable, "-m", "pip", "config", "list"),
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found: dict[str, dict[str, str]] = {section: {} for section in _SECTIONS}
    for line in done.stdout.splitlines() if done.returncode == 0 else ():
        name, _, quoted = line.partition("=")
        section, _, key = name.rpartition(".")
        if section in found and quoted:
            try:
                found[section][key] = str(ast.literal_eval(quoted))
            except (ValueError, SyntaxError):
                continue
    return {key: value for section in _SECTIONS for key, value in found[section].items()}


def _exists(location: str) -> bool:
    """A URL is taken as given; a local folder or file (or file: URL) only where it is."""
    parsed = urlparse(location)
    if parsed.scheme in ("http", "https"):
        return True
    return Path(parsed.path if parsed.scheme == "file" else location).exists()


def index_options(configuration: Mapping[str, str]) -> list[str]:
    """uv's options for where pip's configuration takes packages from."""
    options = ["--index-strategy", "unsafe-best-match"]
    if configuration.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    if "index-url" in configuration:
        options += ["--index-url", configuration["index-url"]]
    for key, option in _LISTS.items():
        for value in configuration.get(key, "").split():
            if key == "trusted-host" or _exists(value):
                options += [option, value]
    return options


def uv_variables(configuration: Mapping[str, str]) -> dict[str, str]:
    """The environment uv runs in: no PYTHON* variable nor an active environment (what it
    builds is the environment's alone), pip's certificate bundle and timeout."""
    variables = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("PYTHON") and name not in ("VIRTUAL_ENV", "CONDA_PREFIX")
    }
    if "cert" in configuration:
        variables.setdefault("SSL_CERT_FILE", configuration["cert"])
    timeout = configuration.get("timeout", configuration.get("default-timeout"))
    if timeout:
        variables.setdefault("UV_HTTP_TIMEOUT", timeout)
    return variables


def venv_command(path: Path) -> list[str]:
    """Makes the environment at `path` on the collector's Python, pip and setuptools in it."""
    options = index_options(pip_configuration())
    return [
        uv(),
        "venv",
        "--seed",
        "--allow-existing",
        "--python",
        sys.executable,
        *options,
        str(path),
    ]


def install_command(python: Path, *arguments: str) -> list[str]:
    """`pip install ARGUMENTS` into the environment of `python`, modules compiled."""
    configuration = pip_configuration()
    options = index_options(configuration)
    # A lock's hashes fix every file already (and uv takes no constraint beside them).
    hashed = "--require-hashes" in arguments
    for constraints in configuration.get("constraint", "").split():
        options += ["--constraint", constraints] if _exists(constraints) and not hashed else []
    command = [uv(), "pip", "install", "--python", str(python), "--compile-bytecode"]
    return [*command, *options, *arguments]


def check_command(python: Path) -> list[str]:
    """`pip check`: every installed package's requirements are met."""
    return [uv(), "pip", "check", "--python", str(python)]
