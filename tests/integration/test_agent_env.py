"""`collector run --agent-env NAME=VALUE`, end to end with local agents of the framework-free
fake plugin: every agent process the run starts (fresh ones per repetition and A/A twins too)
gets the variables and reports them, every row records them, the run's metadata keeps them for
--resume; bad input is refused before anything starts, and an agent whose own report differs
from what was set is refused before any row is written. (The Docker, Slurm and Kubernetes
launchers: tests/docker/test_docker_runs.py, tests/slurm, tests/cluster.)"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from collector_cli import collector
from fake_agent import write_fake_agents

from fwbench.collector.agents.agent_environment import (
    REPORT_VARIABLE,
    check_reported,
    parse_agent_environment,
)
from fwbench.collector.agents.specs import AgentSpecError, Instance
from fwbench.collector.analysis.changes import agent_changes
from fwbench.collector.run.options import Launch, RunOptions, options_from_record, options_record


def _run(
    tmp_path: Path, *extra: str, agents: str = "fake", reports: str = ""
) -> tuple[Path, object]:
    manifest = {"FAKE_STEP_SCALE": "1", **({"FAKE_REPORTS": reports} if reports else {})}
    manifests = write_fake_agents(tmp_path / "agents", {"fake": manifest})
    out = tmp_path / "run"
    done = collector(
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
        "1",
        "--min-seconds",
        "0.05",
        "--scrape-interval",
        "0",
        "--out",
        str(out),
        *extra,
        cwd=tmp_path,
    )
    return out, done


def test_every_agent_process_gets_the_variables_and_every_row_records_them(
    tmp_path: Path, isolated_store
) -> None:
    out, done = _run(
        tmp_path,
        "--aa",
        "fake",
        "--repeat",
        "2",
        "--agent-env",
        "MALLOC_ARENA_MAX=2",
        "--agent-env",
        "XLA_FLAGS=--a=1 --b",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert len(rows) == 4 and set(rows.status) == {"ok"}  # 2 instances x 2 fresh processes
    for environment in rows.environment.map(json.loads):
        assert environment["MALLOC_ARENA_MAX"] == "2"
        assert environment["XLA_FLAGS"] == "--a=1 --b"  # reported because the collector named it
        assert REPORT_VARIABLE not in environment
    options = json.loads((out / "run.json").read_text())["options"]
    assert options["agent_environment"] == {"MALLOC_ARENA_MAX": "2", "XLA_FLAGS": "--a=1 --b"}
    # The same run without them, then compare RUN_A RUN_B: it says what differs besides time.
    plain, done = _run(tmp_path / "plain", "--aa", "fake", "--repeat", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    compared = collector("compare", str(plain), str(out), "--format", "json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr[-3000:]
    changes = json.loads(compared.stdout)["changes"]
    assert changes == [
        f"{agent}: MALLOC_ARENA_MAX (unset) -> 2; XLA_FLAGS (unset) -> --a=1 --b"
        for agent in ("fake", "fake#2")
    ]
    table = collector("compare", str(out), str(plain), cwd=tmp_path)
    assert "changed: fake: MALLOC_ARENA_MAX 2 -> (unset); XLA_FLAGS --a=1 --b -> (unset)" in (
        table.stdout
    )


def test_an_agent_that_reports_another_value_is_refused_before_any_row(
    tmp_path: Path, isolated_store
) -> None:
    # This agent reports MALLOC_ARENA_MAX=7 whatever its environment says, as an agent whose
    # image or activation replaced a variable would: its rows would claim a setting it lacked.
    out, done = _run(tmp_path, "--agent-env", "MALLOC_ARENA_MAX=2", reports="MALLOC_ARENA_MAX=7")
    assert done.returncode != 0
    assert "agent fake does not run with --agent-env (MALLOC_ARENA_MAX='7' not '2')" in done.stderr
    assert not (out / "results.parquet").exists()


def test_bad_agent_env_is_refused_before_anything_starts(tmp_path: Path, isolated_store) -> None:
    for index, (extra, agents, message) in enumerate(
        (
            (("NOEQUALS",), "fake", "give NAME=VALUE"),
            (("1BAD=x",), "fake", "give NAME=VALUE"),
            (("FWBENCH_THREADS=2",), "fake", "sets FWBENCH_THREADS itself; use --threads"),
            (("MASTER_PORT=1",), "fake", "use --world-sizes"),
            (("FAKE_STEP_SCALE=3",), "fake", "agent fake's manifest sets FAKE_STEP_SCALE='1'"),
            (("A=1", "A=2"), "fake", "--agent-env A given twice"),
            (("A=1",), "fake@127.0.0.1:9", "fake@127.0.0.1:9 is attached"),
        )
    ):
        pairs = [part for value in extra for part in ("--agent-env", value)]
        out, done = _run(tmp_path / str(index), *pairs, agents=agents)
        assert done.returncode == 2 and message in done.stderr, (extra, done.stderr[-2000:])
        assert not out.exists()


def test_parse_and_check_rules() -> None:
    assert parse_agent_environment(["A=", "B=x=y", "A="]) == {"A": "", "B": "x=y"}
    try:
        parse_agent_environment(["A=\0"])
    except AgentSpecError as error:
        assert "NUL" in str(error)
    else:
        raise AssertionError("a NUL was accepted")
    check_reported("a", {"X": "1"}, {"X": "1", "Y": "2"})
    check_reported("a", {}, {})
    for reported, why in (({}, "reports none of them"), ({"X": "2"}, "changed them")):
        try:
            check_reported("a", {"X": "1"}, reported)
        except AgentSpecError as error:
            assert why in str(error)
        else:
            raise AssertionError(f"{reported} was accepted")


def test_a_resumed_run_starts_its_agents_with_the_same_variables() -> None:
    launch = Launch(agent_environment={"A": "1"})
    options = RunOptions((Instance("fake"),), None, Path("s"), "c", launch=launch)
    record = json.loads(json.dumps(options_record(options)))
    resumed = options_from_record(record, Path("o"), Path("s"), "c")
    assert resumed.launch.agent_environment == {"A": "1"}
    del record["agent_environment"]  # a run recorded before --agent-env
    assert options_from_record(record, Path("o"), Path("s"), "c").launch.agent_environment == {}


def test_changes_between_runs_name_each_differing_value() -> None:
    def rows(*environments: dict[str, str], version: str = "1.0") -> pd.DataFrame:
        return pd.DataFrame(
            {
                "environment": [json.dumps(e) for e in environments],
                "framework_version": version,
                "libraries": json.dumps({"blas": "openblas"}),
            }
        )

    same = rows({"FWBENCH_THREADS": "1"}, {"FWBENCH_THREADS": "2"})
    assert agent_changes(same, same.copy()) == []
    assert agent_changes(same, rows({"FWBENCH_THREADS": "1"}, version="1.1")) == [
        "framework_version 1.0 -> 1.1",
        "FWBENCH_THREADS 1 | 2 -> 1",
    ]
