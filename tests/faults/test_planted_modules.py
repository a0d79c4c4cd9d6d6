"""Nothing runs from the caller's folder: started from a folder that holds a module named like
each one the collector's Pythons import (torch.py, pip.py, venv.py, a fwbench/ package, ...),
every command that starts a Python succeeds and none of those modules ever runs: environment
creation (venv, pip), a run with its host calibration, a run with an existing interpreter
(--python: the overlay's pip and the environment probe), the conformance suite, `collector
lock` (pip-tools), and the calibration's PyTorch probe and the images' `pip wheel` called
directly. Each planted module, imported, appends its name to a file at an absolute path, then
raises. A real fake-plugin agent, a fresh environment in a folder of the test's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_agent import write_fake_agents

from fwbench.collector.calibration import measure
from fwbench.collector.images import wheelhouse

COLLECTOR = Path(sys.executable).with_name("collector")  # the console script, as users run it
# Third-party and standard-library names alike: what pip, venv, ensurepip, pip-tools, the
# calibration probes, the environment probe and the agent runtime import.
MODULES = (
    "torch",
    "pip",
    "numpy",
    "grpc",
    "venv",
    "ensurepip",
    "piptools",
    "setuptools",
    "wheel",
    "packaging",
    "json",
    "inspect",
    "psutil",
    "sitecustomize",
    "usercustomize",
)
PACKAGES = ("fwbench", "google")  # regular packages shadow the namespace packages
PLANTED = """
import sys
with open({record!r}, "a") as record:
    record.write({name!r} + " " + sys.executable + "\\n")
raise RuntimeError("planted {name} ran: it was imported from the caller's folder")
"""
GEMM = ["--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1", "--min-seconds", "0.05"]


class Folder:
    """The caller's folder with its planted modules, and the commands run from it."""

    def __init__(self, root: Path) -> None:
        self.root, self.work, self.record = root, root / "work", root / "planted-ran.txt"
        self.manifests = write_fake_agents(root / "agents", {"fake": {}})
        self.work.mkdir()
        for name in MODULES:
            text = PLANTED.format(record=str(self.record), name=name)
            (self.work / f"{name}.py").write_text(text)
        for name in PACKAGES:
            (self.work / name).mkdir()
            text = PLANTED.format(record=str(self.record), name=name)
            (self.work / name / "__init__.py").write_text(text)
        self.env = {
            **os.environ,
            "FWBENCH_ENV_DIR": str(root / "envs"),  # a fresh environment, made here
            "FWBENCH_CALIBRATION_DIR": str(root / "calibration"),  # measured by the first run
            "FWBENCH_STORE": str(root / "store.sqlite"),
            "COLUMNS": "200",
        }

    def collector(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(COLLECTOR), *args],
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])
        return done

    def ran(self) -> list[str]:
        """What ran of the planted modules since the last call (each line: name, Python)."""
        if not self.record.exists():
            return []
        lines = self.record.read_text().splitlines()
        self.record.unlink()
        return lines


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Folder]:
    yield Folder(tmp_path_factory.mktemp("planted"))


@pytest.fixture(scope="module")
def agent_python(folder: Folder) -> Path:
    """`collector env fake`: a new environment (venv, then pip), its interpreter printed."""
    done = folder.collector("env", "fake", "--manifests", str(folder.manifests))
    assert "creating the fake environment" in done.stderr
    python = Path(done.stdout.strip().splitlines()[-1])
    assert python.is_relative_to(folder.root / "envs") and python.exists()
    return python


def test_env_creates_an_environment_without_running_them(
    folder: Folder, agent_python: Path
) -> None:
    assert folder.ran() == []
    agents = folder.collector("agents", "--manifests", str(folder.manifests), "--json")
    (row,) = [row for row in json.loads(agents.stdout) if row["agent"] == "fake"]
    assert row["environment"] == "ready"
    assert folder.ran() == []


def test_a_run_with_its_host_calibration_runs_none(folder: Folder, agent_python: Path) -> None:
    out = folder.root / "run"
    done = folder.collector(
        "run",
        "--manifests",
        str(folder.manifests),
        "--agents",
        "fake",
        *GEMM,
        "--scrape-interval",
        "0",
        "--out",
        str(out),
    )
    assert "calibrating this host" in done.stderr  # a fresh calibration folder: measured now
    assert (out / "results.parquet").exists()
    assert folder.ran() == []


def test_a_run_with_an_existing_python_runs_none(folder: Folder, agent_python: Path) -> None:
    out = folder.root / "existing"
    done = folder.collector(
        "run",
        "--manifests",
        str(folder.manifests),
        "--agents",
        "fake",
        *GEMM,
        "--scrape-interval",
        "0",
        "--python",
        str(agent_python),
        "--out",
        str(out),
    )
    assert "building the fake agent packages for an existing Python" in done.stderr
    assert json.loads((out / "run.json").read_text())["agents"]["fake"]["python"] == str(
        agent_python
    )
    assert folder.ran() == []


def test_the_conformance_suite_runs_none(folder: Folder, agent_python: Path) -> None:
    # The suite starts the agent itself, as `collector run` does; two groups keep it short.
    done = folder.collector(
        "conformance",
        "fake",
        "--manifests",
        str(folder.manifests),
        "--checks",
        "describe,cells",
        "--cells",
        "one",
        "--json",
    )
    report = json.loads(done.stdout)
    assert report["failed"] == 0 and report["agent"] == "fake"
    assert folder.ran() == []


def test_calibration_probes_and_image_wheels_run_none(
    folder: Folder, agent_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full calibration (minutes) asks each agent environment whether it has PyTorch
    # (`python -c "import torch"`, which once ran a torch.py of the caller's folder): asked
    # here directly, as are the NumPy probe and the images' `pip wheel`.
    monkeypatch.chdir(folder.work)
    monkeypatch.setenv(wheelhouse.WHEELHOUSE_VARIABLE, str(folder.root / "wheelhouse"))
    assert not measure.has_torch(agent_python)  # the environment has no PyTorch
    assert folder.ran() == []
    assert measure.best_reads([], ["--elements", "4096", "--repetitions", "1"])
    assert folder.ran() == []
    wheel = wheelhouse._local_wheel(folder.root / "agents" / "plugin", lambda _: None)
    assert wheel.name.startswith("fwbench_test_fake_plugin-")
    assert folder.ran() == []


def test_lock_runs_none(folder: Folder, agent_python: Path) -> None:
    # Last: a lock changes the environment's key (the next command would make another).
    done = folder.collector("lock", "fake", "--manifests", str(folder.manifests))
    assert "fake: wrote" in done.stdout
    lock = (folder.manifests / "fake.lock").read_text()
    assert "grpcio==" in lock and "--hash=sha256:" in lock
    assert folder.ran() == []
