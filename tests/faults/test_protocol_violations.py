"""An agent that breaks the protocol gets failed cells that say so, the run exits 1 with no
traceback, and `results`, `compare` and `report` still work on that run. The agent is written
from agent.proto alone (liar_agent.py), as somebody else's would be, and runs as its own
process; the collector is the real command."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from fault_cli import collector

LIES = {
    "zero-samples": "sample_nanoseconds: no samples",
    "negative-samples": "sample_nanoseconds: 12 of 12 not positive",
    "no-result": "result: the Run stream ended without a RunResult",
    "wrong-run-id": "run_id: 'someone-else' answers",
    "too-many": "samples; the request allows 12 to 20",
}


def test_lying_agents_get_failed_cells_and_the_run_stays_usable(
    tmp_path: Path, start_agent: object
) -> None:
    """Every lie in one run beside an honest agent: each liar's cell fails with its own
    reason, the honest one's is measured, and the run's commands work on what it stored."""
    agents = [f"honest@{start_agent('honest')}"]  # type: ignore[operator]
    agents += [f"{lie}@{start_agent(lie)}" for lie in LIES]  # type: ignore[operator]
    out = tmp_path / "run"
    done = collector(
        tmp_path,
        "run",
        f"--agents={','.join(agents)}",
        "--workloads=gemm",
        "--phases=infer",
        "--batch-sizes=1",
        "--iterations=12",
        "--max-iterations=20",
        "--out",
        str(out),
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    assert rows.loc["honest", "status"] == "ok"
    for lie, reason in LIES.items():
        assert rows.loc[lie, "status"] == "failed", lie
        assert rows.loc[lie, "error_code"] == "PROTOCOL_VIOLATION", lie
        assert "the agent broke the protocol" in rows.loc[lie, "error"], lie
        assert reason in rows.loc[lie, "error"], (lie, rows.loc[lie, "error"])
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    for command in (
        ["results", run_id],
        ["compare", run_id, "--baseline", "honest"],
        ["report", run_id, "--out", str(tmp_path / "report")],
    ):
        after = collector(tmp_path, *command)
        assert after.returncode == 0, (command, after.stderr)
        assert "Traceback" not in after.stderr
    assert (tmp_path / "report" / "report.html").is_file()


def test_an_agent_that_ignores_the_thread_count_gets_a_flagged_row(
    tmp_path: Path, start_agent: object
) -> None:
    """Measured right but not as asked: the row is ok (the figure is true for what ran), says
    what differed, and the summary points at it."""
    honest, own = start_agent("honest"), start_agent("own-threads")  # type: ignore[operator]
    out = tmp_path / "run"
    done = collector(
        tmp_path,
        "run",
        f"--agents=honest@{honest},own-threads@{own}",
        "--workloads=gemm",
        "--phases=infer",
        "--batch-sizes=1",
        "--threads=2",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    assert rows.loc["own-threads", "status"] == "ok"
    assert rows.loc["own-threads", "settings_mismatch"] == "threads: asked 2, ran 1"
    assert rows.loc["honest", "settings_mismatch"] == ""
    assert "NOT AS ASKED: threads: asked 2, ran 1" in done.stderr
    assert "1 cell(s) ran with other settings than asked" in done.stdout
