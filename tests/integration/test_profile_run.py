"""`collector run --profile STEPS` and `collector explain` end to end (docs/profiling.md), with
fake-plugin agents whose profiler splits each step into operations of shares the test chooses:
a profiled row carries its time by common class (the shares, the unmapped name and the time
outside every operation making up the step), its operations, the profiler's trace in the run
folder; an agent without a profiler keeps its samples and says why. An agent whose steps take
4 ms more, all of it in matrix multiplies, is decided slower and explain puts most of the gap
in matmul; its twin, when not decided different (nearly always), is not attributed (that no
undecided gap is ever attributed: tests/collector/test_profiles.py); the agent without a profile
says why it is not; the run's answers and the report's name the class holding most of the
decided gap; the report draws each profiled agent's step split over the classes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

pytestmark = pytest.mark.timing  # the verdicts explain needs come from measured times

BASE = "matmul=0.5,convolution=0.25,fake_thing=0.125"  # of a 4 ms step
AGENTS = {
    "profiled": {"FAKE_PROFILE": BASE},
    # 8 ms: matmul 6 ms (4 more), convolution 1 ms, fake_thing 0.5 ms, as the baseline's
    "slower": {
        "FAKE_PROFILE": "matmul=0.75,convolution=0.125,fake_thing=0.0625",
        "FAKE_STEP_SCALE": "2",
    },
    "twin": {"FAKE_PROFILE": BASE},
    "plain": {"FAKE_NO_PROFILER": "this build has no profiler"},
}


@pytest.fixture(scope="module")
def profiled_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    tmp_path = tmp_path_factory.mktemp("profiles")
    manifests = write_fake_agents(tmp_path / "agents", AGENTS)
    out = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
        done = collector(
            "run",
            "--manifests",
            str(manifests),
            "--agents",
            ",".join(AGENTS),
            *("--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1"),
            *("--param", "m=4000", "--iterations", "5", "--max-iterations", "5"),
            *("--min-seconds", "0", "--scrape-interval", "0", "--repeat", "3"),
            # The steps sleep: what else the host runs does not change them.
            *("--interference-threshold", "100", "--profile", "4"),
            "--out",
            str(out),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        explained = collector("explain", str(out), "--baseline", "profiled", "--json", cwd=tmp_path)
        assert explained.returncode == 0, explained.stderr
        shown = collector("explain", str(out), "--baseline", "profiled", cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        reported = collector("report", str(out), "--baseline", "profiled", cwd=tmp_path)
        assert reported.returncode == 0, reported.stderr
    return out, done.stdout + done.stderr, {"json": explained.stdout, "table": shown.stdout}


def test_a_profiled_run_gives_each_row_its_time_by_class(profiled_run) -> None:
    out, said, _ = profiled_run
    rows = pd.read_parquet(out / "results.parquet")
    assert (rows["status"] == "ok").all() and (rows["n"] == 5).all()  # the loop as asked
    row = rows[rows["agent"] == "profiled"].iloc[0]
    assert row["profiler"] == "fake profiler 1.0" and row["profile_steps"] == 4
    step = row["profile_step_seconds"]
    assert step >= 0.004  # each profiled step sleeps 4 ms, as the timed ones
    classes = json.loads(row["profile_classes"])
    assert list(classes) == ["matmul", "convolution", "unmapped", "outside"]
    assert classes["matmul"] == pytest.approx(0.002, rel=1e-3)
    assert classes["convolution"] == pytest.approx(0.001, rel=1e-3)
    assert classes["unmapped"] == pytest.approx(0.0005, rel=1e-3)
    assert sum(classes.values()) == pytest.approx(step)
    assert row["profile_coverage"] == pytest.approx(1 - 0.0005 / step)  # all but unmapped
    assert row["profile_effect"] == pytest.approx(step / row["median_seconds"])
    names = [operation[0] for operation in json.loads(row["profile_operations"])]
    assert names == ["fake::matmul", "fake::convolution", "fake::fake_thing"]
    trace = out / row["profile_trace"]
    assert trace.parent == out / "profiles" and json.loads(trace.read_text())["traceEvents"]
    assert "; profile: matmul " in said  # each cell's line says where its time went
    assert "; not profiled: this build has no profiler" in said
    plain = rows[rows["agent"] == "plain"]
    assert (plain["profile_note"] == "this build has no profiler").all()
    assert plain["profile_classes"].isna().all() and (plain["n"] == 5).all()


def test_explain_puts_a_decided_gap_where_it_was_made(profiled_run) -> None:
    out, printed, explained = profiled_run
    found = {a["agent"]: a for a in json.loads(explained["json"])}
    slower = found["slower"]
    assert slower["verdict"] == "slower" and not slower["not_attributed"], slower
    parts = {part["class"]: part for part in slower["classes"]}
    # The class that holds most of the gap, about the 4 ms the test put there (the rest of the
    # gap is each step's own overhead, which a busy host stretches).
    assert slower["classes"][0]["class"] == "matmul"
    assert parts["matmul"]["share_of_gap"] > 0.5, parts
    assert parts["matmul"]["gap_seconds"] == pytest.approx(0.004, rel=0.3)
    assert slower["distortion"] < 0.5  # the fake profiler adds nothing but the steps' overhead
    assert sum(p["share_of_gap"] for p in parts.values()) == pytest.approx(1)
    assert sum(p["gap_seconds"] for p in parts.values()) == pytest.approx(slower["gap_seconds"])
    twin = found["twin"]  # the same steps, but on a loaded host its processes may differ
    if twin["verdict"] not in ("faster", "slower"):  # nearly always
        assert not twin["classes"]
        assert twin["not_attributed"].startswith(f"the comparison is {twin['verdict']}")
    plain = found["plain"]
    if plain["verdict"] in ("faster", "slower"):
        said = "plain has no profile here: this build has no profiler"
        assert plain["not_attributed"] == said
    # The run's own answers name the class holding most of the gap, as the report's do.
    (line,) = [x for x in printed.splitlines() if "slower is slower than profiled" in x]
    assert "; most of the gap in matmul: " in line and line.endswith("; collector explain)")
    page = (out / "report" / "report.md").read_text()
    assert "; most of the gap in matmul: " in page
    section = page.split("## Where each step's time goes")[1].split("\n## ")[0]
    assert "figures/profiles.png" in section
    assert (out / "report" / "figures" / "profiles.png").stat().st_size > 0
    table = explained["table"]
    assert "share of gap" in table and "twin against profiled" in table
