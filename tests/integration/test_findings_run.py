"""Findings end to end (analysis/findings/, docs/report.md "Findings"): `collector run` of two
fake agents as subprocess agents, one whose batch size 1 steps take 10 times as long
(FAKE_BATCH_SCALE=1=10, tests/runtime/fake_plugin.py) and one whose steps take the same time
at every batch size, so its time per item falls as batch size grows. The run's summary and
`collector compare --json` must name the first agent's batch size 1 once, with its evidence,
and nothing of the second. The steps sleep, so the factor is the test's on any CPU."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

pytestmark = pytest.mark.timing  # its findings come from measured times


def run_fakes(manifests: Path, agents: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`collector run` of the fake agents at batch sizes 1, 2 and 4, a few short steps each."""
    return collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        agents,
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,2,4",
        # The fake plugin's step: m x FAKE_STEP_SCALE = 1 ms of sleep (10 ms for slow at batch
        # size 1). A small product, so the catalogue's FLOPs per step stay far under this
        # host's calibrated ceiling (a 2048^3 one "done" in 1 ms would be past it, and found).
        "--param",
        "m=100",
        "--param",
        "n=16",
        "--param",
        "k=16",
        "--warmup",
        "1",
        "--iterations",
        "10",
        "--min-seconds",
        "0.05",
        # The steps sleep: what else the machine runs does not change them, so no row is
        # to be left out for it here (this test is about the findings, not interference).
        "--interference-threshold",
        "100",
        "--out",
        str(out),
        cwd=out.parent,
    )


def test_ten_times_slower_at_batch_one_is_found_and_monotonic_scaling_is_not(
    tmp_path: Path, isolated_store
) -> None:
    manifests = write_fake_agents(
        tmp_path / "agents",
        {
            "slow": {"FAKE_STEP_SCALE": "10", "FAKE_BATCH_SCALE": "1=10"},
            "steady": {"FAKE_STEP_SCALE": "10"},
        },
    )
    out = tmp_path / "run"
    done = run_fakes(manifests, "slow,steady", out)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    summary = [line for line in done.stdout.splitlines() if line.startswith("finding (")]
    assert len(summary) == 1, done.stdout[-4000:]
    assert summary[0].startswith("finding (off-own-trend): slow gemm infer float32"), summary
    assert "bs=1 is far off its own batch trend" in summary[0], summary

    run_id = json.loads((out / "run.json").read_text())["run_id"]
    compared = collector("compare", run_id, "--baseline", "steady", "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    detail = json.dumps(document["findings"], indent=1)
    # One finding, not three: the same cell is not found again as a backwards pair or as far
    # off the other agent.
    (finding,) = document["findings"]
    assert finding["rule"] == "off-own-trend", detail
    assert finding["run_id"] == run_id
    assert "3x as long" in finding["rule_fired"]
    evidence = {e["cell"]: e for e in finding["evidence"]}
    assert {e["agent"] for e in finding["evidence"]} == {"slow"}, detail
    one, two = evidence["gemm infer bs=1 float32"], evidence["gemm infer bs=2 float32"]
    assert "gemm infer bs=4 float32" in evidence, detail
    # 10 ms against 1 ms of sleep, plus each step's constant overhead (tens of microseconds):
    # the ratio of the steps is a little under 10, beyond both intervals.
    assert 7 < one["median_seconds"] / two["median_seconds"] < 10.5, detail
    assert one["median_ci_low_seconds"] > 3 * two["median_ci_high_seconds"], detail
    assert one["per_item_seconds"] == one["median_seconds"]
    assert two["per_item_seconds"] == two["median_seconds"] / 2
    assert one["repetitions"] == 1 and one["items_per_sample"] == 1
    assert "far off its own batch trend" in finding["statement"]
    assert "steady" not in json.dumps(document["findings"])

    # The steady agent alone: nothing found, and the summary says what was checked.
    alone = run_fakes(manifests, "steady", tmp_path / "alone")
    assert alone.returncode == 0, alone.stdout[-4000:] + alone.stderr[-4000:]
    assert "no findings: 3 measured cells of 1 agent checked for" in alone.stdout, alone.stdout
    assert "finding (" not in alone.stdout
