"""A store that does not exist is refused by every command that only reads it (`results`,
`compare`, `report`, `run --resume`), named in one `error:` line, exit 2, and nothing is made
there: a mistyped --store or $FWBENCH_STORE used to list no runs, exit 0. `collector run
--store NEW` still makes its store. An existing store without runs lists none:
test_cli_conventions.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "conformance"))
from broken_agents import serve  # an agent keeping the protocol, served on a loopback port

COLLECTOR = Path(sys.executable).with_name("collector")
RUN_ID = "20250101-000000-beef"
READERS = {
    "results": ("results",),
    "results-run": ("results", RUN_ID),
    "results-export": ("results", RUN_ID, "--export", "table.csv"),
    "compare": ("compare", RUN_ID, RUN_ID),
    "report": ("report", RUN_ID),
    "resume": ("run", "--resume", RUN_ID),
}


def _collector(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COLLECTOR), *args],
        cwd=cwd,
        env={**os.environ, "FWBENCH_CALIBRATION": "off", **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _refused(done: subprocess.CompletedProcess[str], path: Path) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stdout == ""
    assert done.stderr.startswith(f"error: cannot read the results store {path}: there is no ")
    assert "--store or $FWBENCH_STORE mistyped" in done.stderr and "Traceback" not in done.stderr
    assert not path.parent.exists(), "a missing store's folder was made"


@pytest.mark.parametrize("command", READERS)
def test_a_missing_store_given_by_store_is_refused_by_name(tmp_path: Path, command: str) -> None:
    path = tmp_path / "typo" / "results.sqlite"
    (tmp_path / "cwd").mkdir()
    done = _collector(tmp_path / "cwd", *READERS[command], "--store", str(path))
    _refused(done, path)
    assert not list((tmp_path / "cwd").iterdir())  # no export, report or run folder either


def test_a_missing_store_given_by_the_variable_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "typo" / "results.sqlite"
    _refused(_collector(tmp_path, "results", FWBENCH_STORE=str(path)), path)


def test_a_run_still_makes_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "new" / "results.sqlite"
    server, _, port = serve("honest")
    try:
        ran = _collector(
            tmp_path,
            "run",
            f"--agents=fake-cpu@127.0.0.1:{port}",
            "--workloads=gemm",
            "--phases=infer",
            "--batch-sizes=1",
            "--iterations=12",
            "--max-iterations=20",
            "--out",
            str(tmp_path / "out"),
            "--store",
            str(path),
        )
    finally:
        server.stop(0)
    assert ran.returncode == 0, ran.stderr
    listed = _collector(tmp_path, "results", "--store", str(path))
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert path.is_file() and "ok" in listed.stdout
