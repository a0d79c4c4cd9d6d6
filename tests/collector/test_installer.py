"""uv makes the agents' environments with the host's pip configuration (agents/installer.py):
what `pip config list` shows (here set through PIP_* variables, as a CI host or a proxy user
sets them) becomes uv's options; local folders that are not there are left out, as pip leaves
them out; a hashed lock gets no constraint file (uv refuses one beside --require-hashes); and
uv runs without the caller's PYTHON* variables."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fwbench.collector.agents import installer


@pytest.fixture
def configured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """pip configured by variables only: the index, two extra indexes (one a folder that is
    not there), find-links, a trusted host, a constraint file, a certificate bundle."""
    wheels, constraints = tmp_path / "wheels", tmp_path / "constraints.txt"
    wheels.mkdir()
    constraints.write_text("torch<=2.14.1\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")  # none of the host's own files
    monkeypatch.setenv("PIP_INDEX_URL", "https://mirror.example/simple")
    missing = f"file://{tmp_path}/no-such-index"
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", f"https://extra.example/simple {missing}")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_TRUSTED_HOST", "mirror.example")
    monkeypatch.setenv("PIP_CONSTRAINT", str(constraints))
    monkeypatch.setenv("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("PIP_DEFAULT_TIMEOUT", "99")
    installer.pip_configuration.cache_clear()
    yield tmp_path
    installer.pip_configuration.cache_clear()


def test_pips_configuration_becomes_uvs_options(configured: Path) -> None:
    options = installer.index_options(installer.pip_configuration())
    pairs = list(zip(options[::2], options[1::2], strict=True))
    assert pairs == [
        ("--index-strategy", "unsafe-best-match"),
        ("--index-url", "https://mirror.example/simple"),
        ("--extra-index-url", "https://extra.example/simple"),
        ("--find-links", str(configured / "wheels")),
        ("--allow-insecure-host", "mirror.example"),
    ]
    variables = installer.uv_variables(installer.pip_configuration())
    assert variables["SSL_CERT_FILE"] == "/etc/ssl/certs/ca-certificates.crt"
    assert variables["UV_HTTP_TIMEOUT"] == "99"


def test_constraints_apply_to_resolved_installs_and_not_to_a_hashed_lock(
    configured: Path, tmp_path: Path
) -> None:
    python = tmp_path / "env" / "bin" / "python"
    resolved = installer.install_command(python, "numpy")
    assert resolved[resolved.index("--constraint") + 1] == str(configured / "constraints.txt")
    assert resolved[-1] == "numpy" and "--compile-bytecode" in resolved
    hashed = installer.install_command(python, "--require-hashes", "-r", "agent.lock")
    assert "--constraint" not in hashed


def test_uv_runs_without_the_callers_python_variables(
    configured: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(configured))
    monkeypatch.setenv("VIRTUAL_ENV", str(configured))
    variables = installer.uv_variables(installer.pip_configuration())
    assert "PYTHONPATH" not in variables and "VIRTUAL_ENV" not in variables
    assert variables["PIP_INDEX_URL"] == "https://mirror.example/simple"  # others pass
    done = subprocess.run([installer.uv(), "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith("uv "), done.stderr
