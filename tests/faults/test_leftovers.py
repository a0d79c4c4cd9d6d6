"""No temporary folder outlives a command: `collector run` (and `describe`) with TMPDIR set to
a fresh folder leaves it empty after a success, a failed start, a start that times out, an
agent killed mid-run, an interrupt (SIGTERM, SIGINT, several in a row) mid-cell or during
start-up. The log of an agent that failed to start is kept in the run folder and named; describe
and conformance keep theirs in fwbench-results/logs/.
Real fake-plugin agents (tests/fake_agent.py), the real command."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from fake_agent import write_fake_agents
from interrupted import with_sigint

COLLECTOR = Path(sys.executable).with_name("collector")
AGENTS = {
    "calm": {},
    "broken": {"FWBENCH_DEVICE": "bogus"},  # refuses to start: exit 2, a line in its log
    "slow": {"FAKE_START_SECONDS": "60"},
}
SWEEP = ["--workloads", "gemm", "--phases", "infer", "--param", "m=20000", "--min-seconds", "3"]


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_agents(tmp_path_factory.mktemp("agents"), AGENTS)


class Command:
    """One collector command in a folder of its own, with TMPDIR a fresh folder in it."""

    def __init__(self, tmp_path: Path, manifests: Path, *args: str) -> None:
        self.folder, self.tmp, self.out = tmp_path, tmp_path / "tmp", tmp_path / "run"
        self.tmp.mkdir()
        store = ["--store", str(tmp_path / "store.sqlite"), "--out", str(self.out)]
        extra = store if args[0] == "run" else []
        self.process = subprocess.Popen(
            with_sigint([COLLECTOR, *args, "--manifests", manifests, *extra]),
            cwd=tmp_path,
            env={**os.environ, "TMPDIR": str(self.tmp), "COLUMNS": "300"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_until(self, condition: Callable[[], bool], seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not condition():
            assert self.process.poll() is None, self.process.communicate()
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.05)

    def finish(self, code: int, within: float = 180) -> str:
        stdout, stderr = self.process.communicate(timeout=within)
        assert self.process.returncode == code, stdout + stderr
        assert "Traceback" not in stdout + stderr
        return stderr

    def leftovers(self) -> list[str]:
        return sorted(path.name for path in self.tmp.iterdir())

    def agents_running(self) -> list[int]:
        """Processes whose command line names this command's TMPDIR (an agent's ports file)."""
        mine = []
        for entry in Path("/proc").iterdir():
            try:
                if entry.name.isdigit() and str(self.tmp) in (entry / "cmdline").read_text():
                    mine.append(int(entry.name))
            except OSError:
                continue
        return mine

    def rows(self) -> pd.DataFrame:
        try:
            return pd.read_parquet(self.out / "results.parquet")
        except (FileNotFoundError, OSError, ValueError):  # not written yet, or mid-replace
            return pd.DataFrame()


def test_a_successful_run_leaves_nothing(tmp_path: Path, manifests: Path) -> None:
    run = Command(tmp_path, manifests, "run", "--agents", "calm", *SWEEP, "--min-seconds", "0")
    run.finish(0)
    assert run.leftovers() == []
    assert (run.out / "logs" / "calm.log").is_file()


def test_a_failed_start_keeps_the_log_in_the_run_folder_and_names_it(
    tmp_path: Path, manifests: Path
) -> None:
    run = Command(tmp_path, manifests, "run", "--agents", "calm,broken", *SWEEP)
    stderr = run.finish(2)
    assert run.leftovers() == []
    log = run.out / "logs" / "broken.log"
    assert f"agent log kept: {log}" in stderr.replace("\n", "")
    assert "FWBENCH_DEVICE='bogus'" in log.read_text()
    assert "last log line: fwbench-agent: FWBENCH_DEVICE='bogus'" in " ".join(stderr.split())
    assert not (run.out / "run.json").exists() and not (tmp_path / "store.sqlite").exists()


def test_a_start_that_times_out_leaves_nothing_running(tmp_path: Path, manifests: Path) -> None:
    run = Command(tmp_path, manifests, "run", "--agents", "slow", "--start-timeout", "3", *SWEEP)
    stderr = run.finish(2)
    assert "did not start within 3 s" in stderr
    assert run.leftovers() == [] and run.agents_running() == []
    assert (run.out / "logs" / "slow.log").is_file()


def test_an_agent_killed_mid_run_leaves_nothing(tmp_path: Path, manifests: Path) -> None:
    run = Command(tmp_path, manifests, "run", "--agents", "calm", *SWEEP, "--batch-sizes", "1,2,3")
    run.wait_until(lambda: len(run.rows()) >= 1)
    time.sleep(1.0)  # into the second cell
    os.kill(int(run.rows()["agent_pid"].iloc[0]), signal.SIGKILL)
    run.finish(1)
    assert list(run.rows().sort_values("cell")["status"]) == ["ok", "failed", "ok"]
    assert run.leftovers() == [] and run.agents_running() == []


@pytest.mark.parametrize(
    "signals", [("SIGTERM",), ("SIGINT",), ("SIGTERM", "SIGINT", "SIGTERM")], ids="-".join
)
def test_an_interrupted_run_leaves_nothing(
    tmp_path: Path, manifests: Path, signals: tuple[str, ...]
) -> None:
    run = Command(tmp_path, manifests, "run", "--agents", "calm", *SWEEP, "--batch-sizes", "1,2")
    run.wait_until((run.out / "run.json").exists)
    time.sleep(1.0)  # inside the first cell
    for name in signals:  # more than one: the later ones land while it cleans up
        run.process.send_signal(signal.Signals[name])
        time.sleep(0.1)
    stderr = run.finish(130)
    assert "results measured so far are saved" in stderr and "nothing written" not in stderr
    assert list(run.rows()["status"]) == ["cancelled"]
    assert run.leftovers() == [] and run.agents_running() == []


@pytest.mark.parametrize("command", ["run", "describe"])
def test_an_interrupt_during_start_up_leaves_nothing(
    tmp_path: Path, manifests: Path, command: str
) -> None:
    args = ("run", "--agents", "slow", *SWEEP) if command == "run" else ("describe", "slow")
    started = Command(tmp_path, manifests, *args)
    started.wait_until(lambda: bool(started.agents_running()))  # spawned, not yet serving
    time.sleep(0.5)
    began = time.monotonic()
    started.process.send_signal(signal.SIGTERM)
    started.finish(130, within=30)
    assert time.monotonic() - began < 15  # the start is abandoned, not waited for (60 s)
    assert started.leftovers() == [] and started.agents_running() == []
    assert not started.out.exists()


@pytest.mark.parametrize("command", ["describe", "conformance"])
def test_a_command_without_a_run_folder_keeps_the_log_of_an_agent_that_failed_to_start(
    tmp_path: Path, manifests: Path, command: str
) -> None:
    """describe and conformance have no run folder: the agent's log is kept in
    fwbench-results/logs/COMMAND-STAMP/ and named; nothing is left in TMPDIR."""
    described = Command(tmp_path, manifests, command, "broken")
    stderr = described.finish(2)
    assert "FWBENCH_DEVICE='bogus'" in stderr
    assert described.leftovers() == []
    (log,) = (tmp_path / "fwbench-results" / "logs").glob(f"{command}-*/broken.log")
    assert "FWBENCH_DEVICE='bogus'" in log.read_text()
    assert stderr.splitlines()[-1] == f"agent log kept: {log.relative_to(tmp_path)}"


def test_describe_keeps_the_log_of_an_agent_that_served(tmp_path: Path, manifests: Path) -> None:
    described = Command(tmp_path, manifests, "describe", "calm")
    stderr = described.finish(0)
    (log,) = (tmp_path / "fwbench-results" / "logs").glob("describe-*/calm.log")
    assert f"agent log kept: {log.relative_to(tmp_path)}" in stderr
    assert described.leftovers() == []
