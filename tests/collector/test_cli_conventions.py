"""The CLI keeps the ecosystem's conventions: --version, shell completion, --json on every
listing, results on stdout and everything else on stderr, one table from error to exit code,
choices that name the valid values."""

from __future__ import annotations

import gc
import importlib
import json
import os
import socket
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fwbench.collector import __version__
from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.docker_engine import DockerUnavailable, docker_client
from fwbench.collector.agents.environments import EnvironmentBuildError
from fwbench.collector.agents.specs import AgentSpecError
from fwbench.collector.cli import app
from fwbench.collector.cli.common import EXIT_CODES, ExitCode, exit_code, known_errors
from fwbench.collector.store import PersistenceError, ResultStore

REPO = Path(__file__).resolve().parents[2]


def collector(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "fwbench.collector.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def test_version_and_completion() -> None:
    done = collector("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"collector {__version__}"
    assert "--install-completion" in CliRunner().invoke(app, ["--help"]).output


def test_agents_json_lists_every_manifest_with_its_lock() -> None:
    done = collector("agents", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    # Images in the local engine that declare agents by their labels come after (source image).
    agents = {row["agent"]: row for row in rows if row["source"] == "manifest"}
    assert all(row["source"] == "image" for row in rows[len(agents) :])
    shipped = {p.stem for p in (REPO / "agents" / "manifests").glob("*.toml")}
    assert set(agents) == shipped
    assert agents["torch-cpu"]["lock"] == "current"
    assert agents["torch-cu12"]["requires_gpu"] == "true"


def test_without_docker_agents_lists_the_manifests_and_says_images_were_not(
    tmp_path: Path,
) -> None:
    """`collector agents` lists images that declare agents (docs/image-labels.md) when a
    Docker daemon answers; without one, it lists the rest and says so. A run given an image
    reference then stops at once: exit 2, nothing written."""
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no-docker.sock", "COLUMNS": "200"}
    env["FWBENCH_STORE"] = str(tmp_path / "s.sqlite")
    done = collector("agents", "--json", env=env)
    assert done.returncode == 0, done.stderr
    shipped = {p.stem for p in (REPO / "agents" / "manifests").glob("*.toml")}
    assert {row["agent"] for row in json.loads(done.stdout)} == shipped
    assert "images not listed: no Docker daemon answers" in done.stderr
    out = str(tmp_path / "out")
    run = ("run", "--launcher", "docker", "--agents", "example/numpy-gemm:1.0", "--out", out)
    done = collector(*run, env=env)
    assert done.returncode == ExitCode.NOT_STARTED and "no Docker daemon answers" in done.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.sqlite").exists()


def test_results_json_in_an_empty_store_is_an_empty_list(tmp_path: Path) -> None:
    ResultStore(tmp_path / "s.sqlite").close()  # a missing one is refused (test_missing_store)
    done = collector("results", "--json", "--store", str(tmp_path / "s.sqlite"))
    assert done.returncode == 0 and json.loads(done.stdout) == []


def test_bad_input_goes_to_stderr_with_the_table_s_code(tmp_path: Path) -> None:
    done = collector("run", "--agents", "nope", "--store", str(tmp_path / "s.sqlite"))
    assert done.returncode == ExitCode.NOT_STARTED and done.stdout == ""
    assert "unknown agent 'nope'" in done.stderr


def test_choices_name_the_valid_values(tmp_path: Path) -> None:
    done = collector("run", "--agents", "torch-cpu", "--launcher", "nomad")
    assert done.returncode == 2
    assert all(kind in done.stderr for kind in ("local", "docker", "slurm", "kubernetes"))


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (AgentSpecError, ExitCode.NOT_STARTED),
        (AgentUnavailable, ExitCode.NOT_STARTED),
        (EnvironmentBuildError, ExitCode.NOT_STARTED),
        (PersistenceError, ExitCode.FAILED),
    ],
)
def test_one_table_from_error_to_exit_code(error: type[Exception], code: ExitCode) -> None:
    assert exit_code(error) == code
    assert exit_code(type("Narrower", (error,), {})) == code  # along the MRO, as `except` is


def test_every_error_the_table_names_is_an_exception_class_by_that_name() -> None:
    """The table names the classes (where each is defined), so that `collector --help` imports
    none of the modules that raise them: a class renamed or moved must be renamed there too,
    or its errors would end a command as unexpected ones (exit 1)."""
    for name in EXIT_CODES:
        module, _, qualname = name.rpartition(".")
        found = getattr(importlib.import_module(module), qualname, None)
        assert isinstance(found, type) and issubclass(found, Exception), f"{name}: no such class"
        assert f"{found.__module__}.{found.__qualname__}" == name


def test_known_errors_ends_the_command_on_the_table_s_errors_only() -> None:
    with pytest.raises(typer.Exit) as ended, known_errors():
        raise AgentSpecError("bad --agents")
    assert ended.value.exit_code == ExitCode.NOT_STARTED
    with pytest.raises(KeyError), known_errors():  # not in the table: raised as it was
        raise KeyError("agent")


def test_no_docker_socket_is_said_without_leaking_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked to reach a socket file that is not there, docker-py raises and leaves its own
    socket unclosed (a ResourceWarning that failed `collector doctor`'s tests on a host with
    no daemon): the collector says so before making a client."""
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    _refused_without_a_leak("no socket at")


def _refused_without_a_leak(reason: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(DockerUnavailable, match=reason):
            docker_client()
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_stale_docker_socket_is_said_without_leaking_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A socket file no daemon listens on (a killed dockerd leaves it): the same leak in
    docker-py, the same clear refusal from the collector."""
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(path))  # the file exists; closed below, nobody listens on it
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    _refused_without_a_leak("does not answer")
