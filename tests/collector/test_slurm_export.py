"""`collector run --slurm-export SCRIPT`: the run checked as if it started, then written as a
batch script whose collector runs inside the allocation with the same options (paths made
absolute), its own folder and store, and the --slurm options as #SBATCH lines; nothing is
measured here. tests/slurm/test_slurm_launcher.py submits such a script to a real Slurm."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fwbench.collector.cli import app

sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent
from fake_agent import write_fake_agents


@pytest.fixture(autouse=True)
def in_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths are the caller's


def export(tmp_path: Path, *extra: str) -> tuple[int, str, Path]:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    script = tmp_path / "job.sh"
    args = [
        "run",
        "--manifests",
        str(manifests.relative_to(tmp_path)),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,2",
        "--param",
        "m=64",
        "--param",
        "n=32",
        "--same-process",
        "--slurm-export",
        str(script),
        *extra,
    ]
    done = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    return done.exit_code, " ".join(done.output.split()), script


def job_command(script: Path) -> list[str]:
    """The job's collector command line, as the shell would run it."""
    (line,) = [line for line in script.read_text().splitlines() if line.startswith("exec ")]
    return shlex.split(line.removeprefix("exec ").replace("$folder", "FOLDER"))


def test_the_script_runs_the_same_run_inside_one_nodes_allocation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "never.sqlite"))
    code, said, script = export(
        tmp_path,
        "--out",
        "shared/run",
        "--slurm",
        "partition=cpu",
        "--slurm",
        "time=00:10:00",
        "--launcher",
        "slurm",
    )
    assert code == 0, said
    assert f"wrote {script}: submit it with `sbatch {script}`" in said
    assert f"collector results --merge {tmp_path}/shared/run" in said
    text = script.read_text()
    assert os.access(script, os.X_OK) and text.startswith("#!/bin/sh\n")
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --nodes=1",
        "#SBATCH --job-name=fwbench-collector",
        "#SBATCH --exclusive",  # the node alone, unless the caller sized the job
        f"#SBATCH --output={tmp_path}/shared/run.log",
        "#SBATCH --partition=cpu",
        "#SBATCH --time=00:10:00",
    ]
    assert f"folder={tmp_path}/shared/run" in text
    command = job_command(script)
    assert command[:4] == [sys.executable, "-m", "fwbench.collector.cli", "run"]
    given = command[4:]
    pairs = {word: given[i + 1] for i, word in enumerate(given[:-1]) if word.startswith("--")}
    assert pairs["--manifests"] == str(tmp_path / "agents" / "manifests")  # made absolute
    assert pairs["--agents"] == "fake" and pairs["--batch-sizes"] == "1,2"
    assert [given[i + 1] for i, word in enumerate(given) if word == "--param"] == ["m=64", "n=32"]
    assert "--same-process" in given and "--fresh-process" not in given
    assert given[-4:] == ["--out", "FOLDER", "--store", "FOLDER/store.sqlite"]
    for absent in ("--launcher", "--slurm", "--slurm-export", "--workloads=gemm", "--seed"):
        assert absent not in given  # the job's own, an #SBATCH line, or a default
    # Nothing ran here: no store, no run folder (its parent is made: Slurm writes the log there).
    assert not (tmp_path / "never.sqlite").exists() and not (tmp_path / "shared/run").exists()
    assert (tmp_path / "shared").is_dir()


def test_a_sized_job_is_not_made_exclusive_and_the_default_folder_is_per_job(
    tmp_path: Path,
) -> None:
    code, said, script = export(tmp_path, "--slurm", "cpus-per-task=2")
    assert code == 0, said
    text = script.read_text()
    assert "#SBATCH --exclusive" not in text and "#SBATCH --cpus-per-task=2" in text
    assert 'folder="$PWD/fwbench-results/slurm-$SLURM_JOB_ID"' in text
    assert "#SBATCH --output=fwbench-collector-%j.log" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ["--launcher", "docker"],
            "starts its agents as local processes on its node, not with --launcher docker",
        ),
        (["--slurm", "fake:partition=gpu"], "an exported run is one job, for every agent"),
        (["--resume", "20261129-000000-abcd"], "a run is resumed where it ran"),
        (["--slurm", "ntasks=2"], "--ntasks is what the world size says"),
        (["--batch-sizes", "0"], "batch"),
    ],
)
def test_what_the_run_would_refuse_the_export_refuses_and_writes_nothing(
    tmp_path: Path, extra: list[str], message: str
) -> None:
    code, said, script = export(tmp_path, *extra)
    assert code == 2 and message in said, said
    assert not script.exists()
