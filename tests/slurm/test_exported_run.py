"""A run exported as a batch script (`collector run --slurm-export`), submitted by hand with
sbatch to the real single-node cluster (conftest.py): the collector measures inside the job,
the job ends COMPLETED, and `collector results --merge` adds the run to the caller's store,
where every command reads it."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
from fake_agent import write_fake_agents

COLLECTOR = Path(sys.executable).with_name("collector")


def test_an_exported_run_measures_in_its_job_and_merges_into_the_store(
    slurm_cluster: Path, tmp_path: Path
) -> None:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    script, folder, mine = tmp_path / "job.sh", tmp_path / "shared" / "run", tmp_path / "mine.db"
    export = [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,2",
        "--slurm",
        "time=00:10:00",
        "--slurm-export",
        str(script),
        "--out",
        str(folder),
    ]
    done = subprocess.run(export, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert not folder.exists()  # written, not run

    submitted = subprocess.run(
        ["sbatch", "--parsable", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=True,
    )
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 600
    while subprocess.run(["squeue", "-h", "-j", job], capture_output=True, text=True).stdout:
        assert time.monotonic() < deadline, (folder.parent / "run.log").read_text()[-3000:]
        time.sleep(1.0)
    shown = subprocess.run(
        ["scontrol", "-o", "show", "job", job], capture_output=True, text=True
    ).stdout
    log = Path(f"{folder}.log").read_text()
    assert "JobState=COMPLETED" in shown, log[-3000:]
    rows = pd.read_parquet(folder / "results.parquet")
    assert list(rows["status"]) == ["ok", "ok"] and set(rows["launcher"]) == {"local"}
    run_id = json.loads((folder / "run.json").read_text())["run_id"]

    merged = subprocess.run(
        [str(COLLECTOR), "results", "--store", str(mine), "--merge", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert merged.returncode == 0, merged.stderr
    assert f"run {run_id} (ok): 2 cells added" in " ".join(merged.stdout.split())
    listed = subprocess.run(
        [str(COLLECTOR), "results", "--store", str(mine), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (run,) = json.loads(listed.stdout)
    assert (run["run_id"], run["status"], run["cells"]) == (run_id, "ok", 2)
    show = [str(COLLECTOR), "results", run_id, "--store", str(mine), "--json"]
    shown_rows = subprocess.run(show, capture_output=True, text=True, timeout=120)
    assert [row["status"] for row in json.loads(shown_rows.stdout)] == ["ok", "ok"]
