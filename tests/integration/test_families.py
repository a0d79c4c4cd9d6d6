"""Framework families end to end (verdicts/families.py), with agents whose difference the test
controls (the sleeping fake plugin, told its framework and family by its environment):
`--baseline family` compares each agent with its family's native agent only, decided the
sequential way; rows carry the family; an agent's own reason for not running a cell reaches the
unsupported row."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents

pytestmark = pytest.mark.timing  # its verdicts come from measured times

AGENTS = {
    "native": {},  # framework "fake": its own family's native agent
    "wrapper": {
        "FAKE_FRAMEWORK": "wrapper",
        "FAKE_FAMILY": "fake",
        "FAKE_FAMILY_VERSION": "1.2.3",
        "FAKE_STEP_SCALE": "1.5",
    },
    "other": {"FAKE_FRAMEWORK": "other"},  # a native of its own family: compared with nobody
    "orphan": {"FAKE_FRAMEWORK": "orphan", "FAKE_FAMILY": "absent"},  # its family is not here
}


def test_each_agent_is_decided_against_its_familys_native_agent(tmp_path: Path, isolated_store):
    manifests = write_fake_agents(tmp_path / "agents", AGENTS)
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        ",".join(AGENTS),
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--param",
        "m=3000",
        "--min-seconds",
        "0.2",
        "--scrape-interval",
        "0",
        "--until-decided",
        "--baseline",
        "family",
        "--budget",
        "4m",
        "--out",
        str(out),
        # The steps sleep: a busy host does not change them, so none is left out as interfered.
        "--interference-threshold",
        "100",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    decided = json.loads((out / "run.json").read_text())["until_decided"]
    detail = json.dumps(decided, indent=1)
    assert decided["baseline"] == "family"
    assert [(d["agent"], d["against"]) for d in decided["decisions"]] == [("wrapper", "native")]
    assert decided["decisions"][0]["verdict"] == "slower", detail
    assert "against its family's native agent" in done.stdout
    rows = pd.read_parquet(out / "results.parquet").drop_duplicates("agent").set_index("agent")
    assert rows.loc["wrapper", ["framework", "family", "family_version"]].tolist() == [
        "wrapper",
        "fake",
        "1.2.3",
    ]
    assert rows.loc["native", "family"] == "fake" and rows.loc["native", "family_version"] == ""
    assert rows.loc["orphan", "family"] == "absent"
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    compared = collector(
        "compare", run_id, "--baseline", "family", "--format", "json", cwd=tmp_path
    )
    assert compared.returncode == 0, compared.stderr
    found = json.loads(compared.stdout)
    assert {(c["agent"], c["baseline"]) for c in found["comparisons"]} == {("wrapper", "native")}
    assert any("orphan: no absent agent in the run" in s for s in found["skipped"]), found
    # Tables name each row's own baseline: there is no one agent the heading could name.
    table = collector(
        "compare", run_id, "--baseline", "family", "--format", "markdown", cwd=tmp_path
    )
    assert table.returncode == 0 and "| wrapper vs native |" in table.stdout, table.stdout
    reported = collector("report", run_id, "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    html = (tmp_path / "report" / "report.html").read_text()
    assert '<td class="">wrapper vs native</td>' in html
    assert "Comparison with each agent's family's native agent" in html


def test_the_agents_own_reason_reaches_the_unsupported_row(tmp_path: Path, isolated_store):
    reasons = "lenet/train=the fake infers LeNet only;bert=the fake has no transformer"
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {"FAKE_UNSUPPORTED": reasons}})
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "lenet,bert",
        "--phases",
        "train",
        "--batch-sizes",
        "2",
        "--scrape-interval",
        "0",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet").set_index("workload")
    assert set(rows["status"]) == {"unsupported"}
    assert rows.loc["lenet", "error"] == (
        "agent does not support phase train for lenet: the fake infers LeNet only"
    )
    assert rows.loc["bert", "error"] == "agent does not implement bert: the fake has no transformer"


def test_a_run_with_a_family_agent_points_to_the_family_view(tmp_path: Path, isolated_store):
    agents = {name: AGENTS[name] for name in ("native", "wrapper")}
    manifests = write_fake_agents(tmp_path / "agents", agents)
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "native,wrapper",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--param",
        "m=300",
        "--scrape-interval",
        "0",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert f"collector compare {out} --baseline native" in done.stdout
    assert f"collector compare {out} --baseline family" in done.stdout
