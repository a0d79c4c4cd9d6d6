"""`collector run --python`: an agent in a Python environment the collector did not make (a
virtual environment made here by hand, as a cluster module or a conda environment would be).
What is missing there is refused before anything runs, with the command that installs it;
that very command is then run, and the agent measures with its rows saying where its Python
came from. The collector installs nothing into that environment."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector

GEMM = ["--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1"]
GEMM += ["--param", "m=64", "--param", "n=64", "--param", "k=64", "--min-seconds", "0"]


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("existing") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    return folder / "bin" / "python"


def installed(python: Path) -> str:
    done = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True, text=True)
    return done.stdout


def test_an_existing_environment_is_checked_then_used(
    bare_python: Path, tmp_path: Path, isolated_store: Path
) -> None:
    before = installed(bare_python)
    out = tmp_path / "run"
    refused = collector(
        "run",
        "--agents",
        "numpy-cpu",
        "--python",
        str(bare_python),
        *GEMM,
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stderr
    message = " ".join(refused.stderr.split())
    assert f"numpy-cpu cannot run in {bare_python}" in message
    assert "grpcio>=" in message and "is not installed" in message
    assert "installs nothing into an environment it did not make" in message
    assert not out.exists() and not isolated_store.exists()  # nothing written
    assert installed(bare_python) == before  # and nothing installed there

    # The fix the message gives, run as a user would.
    fix = re.search(r"Install them there: (.+?) \(on a host", message)
    assert fix is not None, message
    subprocess.run([*shlex.split(fix.group(1)), "--quiet"], check=True)

    done = collector(
        "run",
        "--agents",
        "numpy-cpu",
        "--python",
        f"numpy-cpu={bare_python}",
        *GEMM,
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    assert rows["status"].tolist() == ["ok"]
    assert rows["environment_source"].tolist() == ["existing"]
    assert rows["agent_python"].tolist() == [str(bare_python)]
    agent = json.loads((out / "run.json").read_text())["agents"]["numpy-cpu"]
    assert agent["environment_source"] == "existing" and agent["python"] == str(bare_python)
    assert "fwbench" not in installed(bare_python)  # the agent's packages were only lent


def test_a_missing_framework_is_refused_with_what_to_install(
    tmp_path: Path, isolated_store: Path
) -> None:
    # The collector's own environment has the runtime's dependencies, not PyTorch.
    python = str(Path(sys.executable).absolute())
    done = collector("run", "--agents", "torch-cpu", "--python", python, *GEMM, cwd=tmp_path)
    assert done.returncode == 2
    message = " ".join(done.stderr.split())
    assert f"torch-cpu cannot run in {python}" in message
    assert "the torch plugin cannot start there: ModuleNotFoundError" in message
    assert f"{python} -m pip install torch==" in message


def test_bad_python_options_are_refused(bare_python: Path, tmp_path: Path, isolated_store) -> None:
    for extra, text in (
        (["--python", "nope=/usr/bin/python3"], "unknown agent 'nope'"),
        (["--python", str(tmp_path / "missing")], "is not an executable file"),
        (["--python", f"torch-cpu={bare_python}"], "torch-cpu is not among the agents"),
        (["--python", str(bare_python), "--launcher", "docker"], "goes with --launcher local"),
    ):
        done = collector("run", "--agents", "numpy-cpu", *extra, *GEMM, cwd=tmp_path)
        assert done.returncode == 2 and text in " ".join(done.stderr.split()), (extra, done.stderr)
