"""`collector run --profile STEPS` end to end (docs/profiling.md), with fake-plugin agents whose
profiler splits each step into operations of shares the test chooses: the profiled agent's
row carries its time by common class (the shares, the unmapped name and the time outside
every operation making up the step), its operations, the profiler's trace in the run folder;
an agent without a profiler keeps its samples and says why; the timed loop is the same as
without --profile."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

AGENTS = {
    "profiled": {"FAKE_PROFILE": "matmul=0.5,convolution=0.25,fake_thing=0.125"},
    "plain": {"FAKE_UNSUPPORTED": "*/profile=this build has no profiler"},
}


def test_a_profiled_run_gives_each_row_its_time_by_class(tmp_path: Path, isolated_store) -> None:
    manifests = write_fake_agents(tmp_path / "agents", AGENTS)
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        ",".join(AGENTS),
        *("--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1"),
        *("--param", "m=4000", "--iterations", "5", "--max-iterations", "5"),
        *("--min-seconds", "0", "--scrape-interval", "0", "--profile", "4"),
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    assert (rows["status"] == "ok").all() and (rows["n"] == 5).all()  # the loop as asked
    row = rows.loc["profiled"]
    assert row["profiler"] == "fake profiler 1.0" and row["profile_steps"] == 4
    step = row["profile_step_seconds"]
    assert step >= 0.004  # each profiled step sleeps 4 ms, as the timed ones
    classes = json.loads(row["profile_classes"])
    assert list(classes) == ["matmul", "convolution", "unmapped", "outside"]
    assert classes["matmul"] == pytest.approx(0.002, rel=1e-3)
    assert classes["convolution"] == pytest.approx(0.001, rel=1e-3)
    assert classes["unmapped"] == pytest.approx(0.0005, rel=1e-3)
    assert sum(classes.values()) == pytest.approx(step)
    assert row["profile_coverage"] == pytest.approx(0.003 / step)
    assert row["profile_effect"] == pytest.approx(step / row["median_seconds"])
    names = [operation[0] for operation in json.loads(row["profile_operations"])]
    assert names == ["fake::matmul", "fake::convolution", "fake::fake_thing"]
    trace = out / row["profile_trace"]
    assert trace.parent == out / "profiles" and json.loads(trace.read_text())["traceEvents"]
    said = done.stdout + done.stderr  # each cell's line says where its time went
    assert "; profile: matmul " in said
    assert "; not profiled: this build has no profiler" in said
    plain = rows.loc["plain"]
    assert plain["profile_note"] == "this build has no profiler"
    assert pd.isna(plain["profile_classes"]) and plain["n"] == 5
