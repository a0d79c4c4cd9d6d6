"""The question the tool exists to settle, end to end: `collector run` with interleaved
repetitions and an A/A pair, then `collector compare` and `collector report`.

What the verdicts must be is only asserted where the difference is under the test's control
(fake agents whose steps take 2 and 4 ms, whatever the CPU): which TensorFlow variant is
faster depends on the machine (oneDNN beats Eigen 2.1-2.6x for conv2d training on a Xeon, ties
on a Zen 3 EPYC; docs/frameworks.md), and so does whether two processes of one agent differ,
so with the real agents the test checks the tool's bookkeeping and how it labels the A/A pair,
not which library wins."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

pytestmark = pytest.mark.timing  # its verdicts come from measured times


# Real TensorFlow variants through run, compare and report: the same bookkeeping as the fake
# agents' tests below, with differences they control; tf-mkl and tf-eigen themselves run in
# tests/integration/test_frameworks.py. Six TensorFlow processes: `make test-full`.
@pytest.mark.full
def test_tf_variants_interleave_and_the_aa_pair_is_labelled(tmp_path: Path, isolated_store) -> None:
    out = tmp_path / "run"
    done = collector(
        "run",
        "--agents",
        "tf-mkl,tf-eigen",
        "--aa",
        "tf-eigen",
        "--workloads",
        "conv2d",
        "--phases",
        "train",
        "--batch-sizes",
        "8",
        "--repeat",
        "2",  # two rows of the order (a fake-agent test below runs three); 6 TF processes
        "--warmup",
        "2",
        "--min-seconds",
        "0.4",
        # The tool's bookkeeping, not the machine, is tested: no row left out as interfered
        # (a busy host would leave the A/A pair without a noise floor).
        "--interference-threshold",
        "100",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    table = pd.read_parquet(out / "results.parquet").sort_values("cell")
    # Interleaved: each repetition runs every agent before the next repetition starts,
    # each in a process of its own (two processes of one agent can differ for their whole
    # life, docs/report.md: fresh ones turn that into noise the intervals count), and the
    # agents' order turns each repetition (rows of a Williams design, schedule.py).
    agents = ["tf-mkl", "tf-eigen", "tf-eigen#2"]
    rounds = [(0, 1, 2), (1, 2, 0)]
    order = [(agents[i], repetition) for repetition, row in enumerate(rounds) for i in row]
    assert list(zip(table["agent"], table["repetition"], strict=True)) == order
    assert table["agent_pid"].nunique() == 6
    meta = json.loads((out / "run.json").read_text())
    run_id = meta["run_id"]

    compared = collector(
        "compare", run_id, "--baseline", "tf-eigen", "--format", "json", cwd=tmp_path
    )
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    verdicts = {c["agent"]: c for c in document["comparisons"]}
    mkl, twin = verdicts["tf-mkl"], verdicts["tf-eigen#2"]
    # On failure: the verdicts, and per row the process and its kernel CPU time, which showed
    # that two processes of one agent can differ for their whole life (docs/report.md).
    columns = ["agent", "repetition", "agent_pid", "median_seconds", "cpu_system_percent"]
    detail = json.dumps(document, indent=1) + "\n" + table.reindex(columns=columns).to_string()
    assert mkl["verdict"] in ("faster", "slower", "equivalent", "undecided"), detail
    assert mkl["speedup_ci_low"] <= mkl["speedup"] <= mkl["speedup_ci_high"], detail
    # The A/A pair is judged against the default floor and flagged. Whether these processes
    # differ is the machine's: a fresh-clone CI on 2026-11-26 had tf-eigen 1.21x slower than
    # its twin, in all 4 rounds, with 2-3x its kernel CPU time (p 0.03), when the agents still
    # ran in one fixed order. Even with no real difference a 5% test says "different" in up to
    # 5% of runs. So a difference is allowed, said as the tool must say it.
    assert twin["notes"].startswith("A/A"), detail
    if twin["verdict"] in ("faster", "slower"):
        assert twin["notes"].startswith("A/A: the same agent differs from itself"), detail
    assert document["measured_noise_floor"] is not None
    _report_shows_the_twin(run_id, "tf-eigen", out, tmp_path)


def _report_shows_the_twin(run_id: str, baseline: str, out: Path, tmp_path: Path) -> None:
    """`collector report` of the run: its plots, and the baseline's A/A twin named."""
    report = collector("report", run_id, "--baseline", baseline, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = (out / "report" / "report.html").read_text()
    assert html.count('<img class="plot"') >= 4
    assert f"{baseline}#2" in html


def test_compare_calls_a_controlled_difference_and_aa_no_difference(
    tmp_path: Path, isolated_store
) -> None:
    """Two agents of the sleeping fake plugin, one taking twice as long per step: compare
    must call it slower with an interval around 0.5, and the fast one's A/A twin no
    difference. Sleep-bound steps keep the factor on any CPU."""
    manifests = write_fake_agents(
        tmp_path / "agents", {"fast": {}, "slow": {"FAKE_STEP_SCALE": "2"}}
    )
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fast,slow",
        "--aa",
        "fast",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--param",
        "m=2000",  # the fake plugin's step: 2000 us
        "--repeat",
        "3",
        "--min-seconds",
        "0.2",
        # The steps sleep: a busy host does not change them, so none is left out as interfered.
        "--interference-threshold",
        "100",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    table = pd.read_parquet(out / "results.parquet").sort_values("cell")
    # Interleaved: each repetition runs every agent, each in a process of its own, before the
    # next starts, and the agents' order turns each repetition (a Williams design's rows).
    assert list(table["repetition"]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    orders = [tuple(rows["agent"]) for _, rows in table.groupby("repetition", sort=True)]
    assert all(sorted(order) == ["fast", "fast#2", "slow"] for order in orders)
    assert len(set(orders)) == 3 and len({order[0] for order in orders}) == 3
    assert table["agent_pid"].nunique() == 9
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    compared = collector("compare", run_id, "--baseline", "fast", "--json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    document = json.loads(compared.stdout)
    verdicts = {c["agent"]: c for c in document["comparisons"]}
    slow, twin = verdicts["slow"], verdicts["fast#2"]
    detail = json.dumps(document, indent=1)
    assert slow["verdict"] == "slower", detail
    # 2 ms against 4 ms of sleep, plus each step's constant overhead (tens of microseconds):
    # the ratio is a little above 0.5, never far from it.
    assert 0.45 < slow["speedup_ci_low"] <= slow["speedup"] <= slow["speedup_ci_high"] < 0.56, (
        detail
    )
    assert slow["method"] == "processes", detail
    assert twin["verdict"] in ("equivalent", "undecided"), detail  # never a difference
    assert twin["notes"].startswith("A/A"), detail
    assert document["measured_noise_floor"] is not None
    _report_shows_the_twin(run_id, "fast", out, tmp_path)
