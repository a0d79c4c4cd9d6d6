"""The `collector` console script on bad input: exit 2, one `error:` line, nothing written.

Runs the installed script as a user would, each case in its own temporary working folder with
the store, the agent environments and TMPDIR redirected under it. Every case is a separate
process; they are started side by side once per module (each costs ~0.7 s of imports) and
the tests below check their outcomes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from fwbench.collector.store.database import ResultStore
from fwbench.collector.store.schema import COLUMN_NAMES

pytestmark = pytest.mark.timing  # each refused command within its time limit

COLLECTOR = shutil.which("collector", path=str(Path(sys.executable).parent))
RUN_ID = "20250101-000000-beef"
STARTED = pd.Timestamp(1_700_000_000_123_456_789, tz="UTC")
WORKLOADS = (
    "gemm, conv2d, lenet, resnet18, resnet50, resnet152, vgg16, mobilenet_v2, efficientnet_b0, lstm"
)
EXPORTS = (".csv", ".parquet", ".jsonl", ".md")

BAD_MANIFEST = """schema_version = 1
name = "Torch CPU"
plugin = "torch"

[install]
requirements = []
local_packages = []
"""


@dataclass(frozen=True)
class Case:
    """One collector invocation. In args, {port} is a loopback port nobody listens on and
    {root} the case's own folder (outside its working folder)."""

    args: tuple[str, ...]
    stored_run: bool = False  # the store holds RUN_ID before the command runs
    files: tuple[tuple[str, str], ...] = ()  # (path under {root}, text) written first


def run_case(*args: str) -> Case:
    return Case(("run", "--agents", "torch-cpu", *args, "--out", "out"))


# The unreachable case comes first: its 3 s of waiting overlaps the others' work.
CASES: dict[str, Case] = {
    "run-unreachable": Case(
        ("run", "--agents", "x@127.0.0.1:{port}", "--start-timeout", "3", "--out", "out")
    ),
    "run-unknown-agent": Case(("run", "--agents", "nope", "--out", "out")),
    "run-unknown-workload": run_case("--workloads", "gemm,nope"),
    "run-unknown-phase": run_case("--phases", "inference"),
    "run-batch-size-0": run_case("--batch-sizes", "0"),
    "run-batch-size-x": run_case("--batch-sizes", "x"),
    "run-malformed-address": Case(("run", "--agents", "a@b", "--out", "out")),
    "run-workload-in-brackets": run_case("--workloads", "[gemm]"),
    "run-seed-negative": run_case("--seed", "-1"),
    "run-seed-too-big": run_case("--seed", str(2**64)),
    "run-threads-huge": run_case("--threads", "99999999999"),
    "run-iterations-contradict": run_case("--iterations", "50", "--max-iterations", "10"),
    "run-out-is-a-file": Case(
        ("run", "--agents", "torch-cpu", "--out", "{root}/afile"), files=(("afile", "x"),)
    ),
    "agents-bad-manifest-name": Case(
        ("agents", "--manifests", "{root}/manifests"),
        files=(("manifests/bad.toml", BAD_MANIFEST),),
    ),
    "results-unknown-run": Case(("results", "NOPE"), stored_run=True),
    "results-list": Case(("results",), stored_run=True),
    "results-export-xlsx": Case(("results", RUN_ID, "--export", "x.xlsx"), stored_run=True),
    **{
        f"results-export{suffix}": Case(
            ("results", RUN_ID, "--export", f"table{suffix}"), stored_run=True
        )
        for suffix in EXPORTS
    },
}


@dataclass(frozen=True)
class Workspace:
    cwd: Path  # the user's working folder: must stay empty on errors
    store: Path
    env_dir: Path
    tmpdir: Path  # TMPDIR of the collector process
    env: dict[str, str]


@dataclass(frozen=True)
class Outcome:
    workspace: Workspace
    done: subprocess.CompletedProcess[str]
    stored: pd.DataFrame | None  # the results table of RUN_ID when the store held it


def make_workspace(root: Path) -> Workspace:
    cwd, tmpdir = root / "cwd", root / "tmp"
    cwd.mkdir(parents=True)
    tmpdir.mkdir()
    store = root / "store" / "results.sqlite"
    env_dir = root / "envs"
    env = dict(os.environ)
    env.pop("FWBENCH_MANIFEST_PATH", None)
    env.update(
        FWBENCH_STORE=str(store),
        FWBENCH_ENV_DIR=str(env_dir),
        TMPDIR=str(tmpdir),
        XDG_DATA_HOME=str(root / "xdg-data"),
        XDG_CACHE_HOME=str(root / "xdg-cache"),
    )
    return Workspace(cwd, store, env_dir, tmpdir, env)


def store_run(path: Path) -> pd.DataFrame:
    """Puts RUN_ID with an ok and a failed cell in the store at `path`; returns its table."""
    store = ResultStore(path)
    try:
        store.start_run(RUN_ID, path.parent / "out", "2025-01-01T00:00:00+00:00", {})
        common: dict[str, Any] = {"schema_version": 1, "run_id": RUN_ID, "agent": "fake"}
        ok = {
            **common,
            "cell": 0,
            "workload": "gemm",
            "batch_size": 1,
            "median_seconds": 0.002,
            "measure_started_at": STARTED,
            "measure_ended_at": STARTED + pd.Timedelta(seconds=1),
            "status": "ok",
        }
        failed = {
            **common,
            "cell": 1,
            "workload": "lenet",
            "batch_size": 8,
            "median_seconds": float("nan"),
            "status": "failed",
            "error": "boom",
        }
        store.add_result(RUN_ID, ok, [2_000_000])
        store.add_result(RUN_ID, failed, [])
        store.finish_run(RUN_ID, "failed", "2025-01-01T00:01:00+00:00", {})
        return store.results(RUN_ID)
    finally:
        store.close()


def unused_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Outcome]:
    assert COLLECTOR is not None, f"no collector script beside {sys.executable}"
    port = str(unused_port())
    prepared = {}
    for name, case in CASES.items():
        root = tmp_path_factory.mktemp(name)
        workspace = make_workspace(root)
        stored = store_run(workspace.store) if case.stored_run else None
        for relative, text in case.files:
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text)
        args = [arg.replace("{port}", port).replace("{root}", str(root)) for arg in case.args]
        prepared[name] = (workspace, stored, args)

    def run(name: str) -> Outcome:
        workspace, stored, args = prepared[name]
        done = subprocess.run(
            [COLLECTOR, *args],
            cwd=workspace.cwd,
            env=workspace.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return Outcome(workspace, done, stored)

    # A few at a time, each with its own time limit: all at once on a 2-CPU host under another
    # test worker's load, the first one waited on outlasted a shared 60 s (stop 54's run).
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        found = dict(zip(prepared, pool.map(run, prepared), strict=True))
    return found


def error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single `error:` line of a command that exited 2."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: "), done.stderr
    assert lines[0].removeprefix("error: ").strip()
    return lines[0]


def assert_nothing_created(workspace: Workspace) -> None:
    assert list(workspace.cwd.iterdir()) == []  # neither fwbench-results/ nor --out
    assert not workspace.store.exists()
    assert not workspace.store.parent.exists()
    assert not workspace.env_dir.exists()


# --- collector run ----------------------------------------------------------------------------


# case -> what its error line must say
RUN_ERRORS = {
    "run-unknown-agent": [
        "unknown agent 'nope'",
        "declared agents: ",
        "torch-cpu",
        "NAME@HOST:PORT",
    ],
    "run-unknown-workload": ["unknown workload 'nope'", f"valid: {WORKLOADS}"],
    "run-unknown-phase": ["unknown phase 'inference'", "valid: train, infer"],
    "run-batch-size-0": ["invalid batch size 0", ">= 1"],
    "run-batch-size-x": ["invalid batch size 'x'", "integer"],
    "run-malformed-address": ["invalid agent address 'a@b'", "NAME@HOST:PORT"],
    "run-unreachable": ["cannot reach agent x at 127.0.0.1:", "within 3 s"],
    "run-seed-negative": ["invalid seed -1", "allowed 0..18446744073709551615"],
    "run-seed-too-big": [f"invalid seed {2**64}"],
    "run-threads-huge": ["invalid thread count 99999999999", "allowed 0..4096"],
    "run-iterations-contradict": ["--iterations 50 exceeds --max-iterations 10"],
    "run-out-is-a-file": ["afile is a file"],
}


@pytest.mark.parametrize("case", RUN_ERRORS)
def test_cli_run_bad_input_fails_cleanly(outcomes: dict[str, Outcome], case: str) -> None:
    outcome = outcomes[case]
    line = error_line(outcome.done)
    for fragment in RUN_ERRORS[case]:
        assert fragment in line
    assert outcome.done.stdout == ""
    assert_nothing_created(outcome.workspace)


def test_cli_run_unreachable_agent_leaves_no_temporary_folder(
    outcomes: dict[str, Outcome],
) -> None:
    # Nothing is written before every agent is up: that includes the agent-log folder the
    # run makes in TMPDIR.
    outcome = outcomes["run-unreachable"]
    assert outcome.done.returncode == 2
    assert list(outcome.workspace.tmpdir.iterdir()) == []


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("run-workload-in-brackets", "unknown workload '[gemm]'"),
        ("agents-bad-manifest-name", "name 'Torch CPU' must match ^[a-z0-9][a-z0-9._-]*$"),
    ],
    ids=["workload-in-brackets", "manifest-name-pattern"],
)
def test_cli_error_message_is_printed_verbatim(
    outcomes: dict[str, Outcome], case: str, expected: str
) -> None:
    # Messages quote user input and regular expressions: square brackets in them are text,
    # not console markup to interpret.
    line = error_line(outcomes[case].done)
    assert expected in line


# --- collector results ------------------------------------------------------------------------


def test_cli_results_unknown_run(outcomes: dict[str, Outcome]) -> None:
    line = error_line(outcomes["results-unknown-run"].done)
    assert "no run 'NOPE'" in line
    assert "`collector results` lists the runs" in line


def test_cli_results_lists_stored_run(outcomes: dict[str, Outcome]) -> None:
    done = outcomes["results-list"].done
    assert done.returncode == 0, done.stderr
    assert RUN_ID in done.stdout


def test_cli_results_unknown_export_format(outcomes: dict[str, Outcome]) -> None:
    outcome = outcomes["results-export-xlsx"]
    line = error_line(outcome.done)
    assert "'.xlsx'" in line
    assert "valid: .csv, .parquet, .jsonl, .md" in line
    assert list(outcome.workspace.cwd.iterdir()) == []


def exported(outcomes: dict[str, Outcome], suffix: str) -> tuple[Path, pd.DataFrame]:
    outcome = outcomes[f"results-export{suffix}"]
    assert outcome.done.returncode == 0, outcome.done.stderr
    assert f"wrote 2 rows to table{suffix}" in outcome.done.stdout
    path = outcome.workspace.cwd / f"table{suffix}"
    assert [p.name for p in outcome.workspace.cwd.iterdir()] == [path.name]
    assert outcome.stored is not None
    return path, outcome.stored


def test_cli_results_export_parquet(outcomes: dict[str, Outcome]) -> None:
    path, stored = exported(outcomes, ".parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(path), stored)


def test_cli_results_export_markdown(outcomes: dict[str, Outcome]) -> None:
    path, stored = exported(outcomes, ".md")
    lines = path.read_text().splitlines()
    assert len(lines) == 2 + len(stored)
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert header == list(COLUMN_NAMES)
    assert "gemm" in lines[2]
    assert "lenet" in lines[3]


def read_text_export(path: Path) -> pd.DataFrame:
    if path.suffix == ".csv":
        return pd.read_csv(path)
    return pd.DataFrame([json.loads(line) for line in path.read_text().splitlines()])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_cli_results_export_text(outcomes: dict[str, Outcome], suffix: str) -> None:
    path, _ = exported(outcomes, suffix)
    back = read_text_export(path)
    assert tuple(back.columns) == COLUMN_NAMES
    assert back["run_id"].tolist() == [RUN_ID, RUN_ID]
    assert back["cell"].tolist() == [0, 1]
    assert back["workload"].tolist() == ["gemm", "lenet"]
    assert back["median_seconds"].iloc[0] == 0.002
    assert pd.isna(back["median_seconds"].iloc[1])
    assert back["status"].tolist() == ["ok", "failed"]
    assert back["error"].iloc[1] == "boom"
    started = pd.Timestamp(back["measure_started_at"].iloc[0])
    assert started.floor("s") == STARTED.floor("s")
    assert pd.isna(back["measure_started_at"].iloc[1])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_cli_results_export_text_keeps_timestamp_precision(
    outcomes: dict[str, Outcome], suffix: str
) -> None:
    # The schema's timestamps are datetime64[ns, UTC]; every export format must keep them.
    path, _ = exported(outcomes, suffix)
    back = read_text_export(path)
    assert pd.Timestamp(back["measure_started_at"].iloc[0]) == STARTED
