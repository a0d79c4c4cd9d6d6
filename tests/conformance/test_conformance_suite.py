"""`collector conformance HOST:PORT` (the real command, in a subprocess) against agents served
over real loopback sockets: one that keeps the protocol passes (exit 0), and each agent with
one deliberate defect fails the check of that defect, with its reason, and exits 3."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from broken_agents import ThreadedFake, serve
from interrupted import with_sigint

from fwbench.collector.agents.client import AgentClient
from fwbench.collector.cli.common import ExitCode
from fwbench.collector.cli.conformance import interrupted
from fwbench.collector.conformance.heartbeat import LATE_SECONDS
from fwbench.collector.conformance.plan import GROUPS
from fwbench.collector.run.liveness import MEASURE_GAP_SECONDS
from fwbench.runtime.security import ServerSecurity
from fwbench.runtime.server import create_server

pytestmark = pytest.mark.timing  # heartbeats and hangs against the clock


def run_command(
    target: int | str, *args: str, **options: object
) -> subprocess.CompletedProcess[str]:
    """`collector conformance TARGET ARGS...` as a user runs it; a port means 127.0.0.1:PORT."""
    address = f"127.0.0.1:{target}" if isinstance(target, int) else target
    return subprocess.run(
        [sys.executable, "-m", "fwbench.collector.cli", "conformance", address, *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        **options,  # type: ignore[call-overload]
    )


def conformance(port: int, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    done = run_command(port, "--json", *args)
    report = json.loads(done.stdout) if done.stdout.strip() else {}
    return done, report


@pytest.fixture
def agent() -> Iterator[object]:
    servers = []

    def start(kind: str) -> int:
        server, servicer, port = serve(kind)
        servers.append((server, servicer))
        return port

    yield start
    for server, servicer in servers:
        server.stop(0)
        servicer.let_go()


def failures(report: dict) -> dict[str, str]:
    return {c["check"]: c["reason"] for c in report["checks"] if c["result"] == "fail"}


# The variable an agent served here runs with and reports (FWBENCH_REPORT_VARIABLES names it:
# the runtime reads its process's environment, this test process's), given to the suite as
# what the agent was started with.
REPORTED = {"FWBENCH_REPORT_VARIABLES": "CONFORMANCE_SWITCH", "CONFORMANCE_SWITCH": "on"}
AGENT_ENV = ("--agent-env", "CONFORMANCE_SWITCH=on")
# Every group but the heartbeat's, which watches a run for 17 s: the defects below are not
# the heartbeat's (the honest agent, the no-heartbeat one and the hung one run all groups).
NO_HEARTBEAT_CHECK = ("--checks", ",".join(g for g in GROUPS if g != "heartbeat"))
LONG_STEP = "heartbeat: a Progress every 2 s through a step over 6 s"
# The fake's gemm step sleeps m microseconds times FAKE_STEP_SCALE: at this scale the long
# run's m=64 steps take 0.64 s, and the long-step check's 12 s step is m=1200, whose tensors
# (about 100 MB by the catalogue's byte model) fit its memory budget on any host.
LONG_STEPS = "10000"


def test_an_agent_that_keeps_the_protocol_passes(agent, monkeypatch) -> None:
    for name, value in REPORTED.items():
        monkeypatch.setenv(name, value)
    done, report = conformance(agent("honest"), "--cells", "all", *AGENT_ENV)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report["failed"] == 0 and report["passed"] >= 30
    results = {c["check"]: c["result"] for c in report["checks"]}
    for check in (
        "environment reports FWBENCH_REPORT_VARIABLES",
        "heartbeat: a Progress every 2 s for 17 s",
        "busy refusal to another caller: no run id",
        "bad request while busy: its own status, not FAILED_PRECONDITION",
        "Cancel without run id from another caller: cancelled false",
    ):
        assert results[check] == "pass", check
    # The fake declares gemm (train, infer; float32, float64) and lenet (infer; two modes):
    # cells of both run, the undeclared train phase of lenet is refused UNIMPLEMENTED.
    assert results["run lenet infer float32 eager"] == "pass"
    assert results["run gemm train float64 eager"] == "pass"
    assert results["refuse undeclared phase: UNIMPLEMENTED"] == "pass"
    assert results["Cancel of the running run: CANCELLED"] == "pass"
    skipped = {c["check"]: c["reason"] for c in report["checks"] if c["result"] == "skip"}
    assert skipped["/metrics parses"] == "Describe declares no /metrics (metrics_port 0)"
    # The lenet "compiled" mode is declared but refused by the plugin's build: allowed.
    assert "refused as unsupported" in skipped["run lenet infer float32 compiled"]
    # The fake's steps take m microseconds: its declared limits allow no step of 6 s.
    assert skipped[LONG_STEP].startswith("no step longer than the 6 s stall limit within ")
    assert re.search(
        r"the longest, gemm train float32 eager m=\d+ .*, lasted [\d.e-]+ s$", skipped[LONG_STEP]
    )


def test_an_agent_that_beats_through_a_long_step_passes(agent, monkeypatch) -> None:
    """The honest agent with steps of m x 10 ms: the long-step check grows gemm until one step
    outlasts the measuring stall limit (6 s), and the heartbeat goes on through it."""
    monkeypatch.setenv("FAKE_STEP_SCALE", LONG_STEPS)
    done, report = conformance(agent("honest"), "--checks", "heartbeat")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    check = next(c for c in report["checks"] if c["check"] == LONG_STEP)
    assert check["result"] == "pass", check
    step, silence = map(
        float,
        re.search(r"a step of ([\d.]+) s, longest silence ([\d.]+) s", check["reason"]).groups(),
    )
    assert step > MEASURE_GAP_SECONDS and silence <= LATE_SECONDS


@pytest.mark.parametrize(
    ("kind", "check", "reason"),
    [
        (
            "no-result",
            "run gemm train float32 eager",
            "the Run stream ended OK without a RunResult",
        ),
        (
            "unknown-workload-ok",
            "refuse unknown workload: NOT_FOUND",
            "expected NOT_FOUND, the run succeeded",
        ),
        (
            "unknown-workload-internal",
            "refuse unknown workload: NOT_FOUND",
            "expected NOT_FOUND, got INTERNAL (KeyError: no-such-workload)",
        ),
        ("next-major", "spec_version major", "spec_version 2.0 has major 2"),
        (
            "ignores-cancel",
            "Cancel of the running run: CANCELLED",
            "Cancel of the running run's id answered cancelled = false",
        ),
        (
            "reason-for-offered",
            "unsupported reasons name what is not offered",
            "unsupported_reasons['gemm']: yet gemm is offered",
        ),
        ("own-family", "identity", "identity.family 'fake' must be lower-case letters"),
        (
            "wrong-dtype",
            "run gemm train float32 eager",
            "settings.dtype is float64, the request asked for float32",
        ),
    ],
)
def test_a_broken_agent_fails_with_the_reason(agent, kind: str, check: str, reason: str) -> None:
    done, report = conformance(agent(kind), "--cells", "one", *NO_HEARTBEAT_CHECK)
    assert done.returncode == ExitCode.NONCONFORMING == 3, done.stderr[-3000:]
    failed = failures(report)
    assert check in failed, failed
    assert reason in failed[check]


@pytest.mark.parametrize(
    ("kind", "check", "reason", "args"),
    [
        (
            "no-heartbeat",
            "heartbeat: a Progress every 2 s for 17 s",
            "the long run sent nothing for 1",  # 16.x s, from its first STAGE_MEASURE
            (),
        ),
        (
            "stuck-loop",
            "heartbeat: a Progress every 2 s for 17 s",
            "iterations_done stood at 0 for 1",  # 1x s of STAGE_MEASURE
            (),
        ),
        (
            "cancels-any-caller",
            "Cancel without run id from another caller: cancelled false",
            "answered cancelled = true, and the run ended: it ended with CANCELLED",
            NO_HEARTBEAT_CHECK,
        ),
        (
            "reveals-run-id",
            "busy refusal to another caller: no run id",
            "the busy refusal to another caller names the active run's id",
            NO_HEARTBEAT_CHECK,
        ),
        (
            "skips-reported-variables",
            "environment reports FWBENCH_REPORT_VARIABLES",
            "Describe.environment has CONFORMANCE_SWITCH='(absent)', not 'on'",
            (*NO_HEARTBEAT_CHECK, *AGENT_ENV),
        ),
        (
            "busy-before-validity",
            "bad request while busy: its own status, not FAILED_PRECONDITION",
            "batch_size 0 while another run is on: expected INVALID_ARGUMENT, got "
            "FAILED_PRECONDITION",
            NO_HEARTBEAT_CHECK,
        ),
        (
            "no-health",
            "health: SERVING",
            "health Check(''): UNIMPLEMENTED (Method not found!): the agent serves no "
            "grpc.health.v1",
            NO_HEARTBEAT_CHECK,
        ),
    ],
)
def test_a_broken_agent_fails_that_check_alone(
    agent, monkeypatch, kind: str, check: str, reason: str, args: tuple[str, ...]
) -> None:
    """Each defect the suite missed before, on an agent otherwise honest: exit 3, that one
    check failed with its reason, every other check passed or skipped."""
    for name, value in REPORTED.items():
        monkeypatch.setenv(name, value)
    done, report = conformance(agent(kind), "--cells", "one", *args)
    assert done.returncode == ExitCode.NONCONFORMING == 3, done.stderr[-3000:]
    failed = failures(report)
    assert list(failed) == [check], failed
    assert reason in failed[check]


def test_a_hung_agent_fails_in_a_minute_naming_where_it_hung(agent) -> None:
    """An agent whose Run never sends anything: the first check that runs a cell fails once
    the stream has been silent for the collector's stall limit (15 s), and the checks after it
    are not run, instead of each waiting out its own deadline (the cell timeout, 300 s)."""
    done, report = conformance(agent("hangs"), "--cells", "one")
    assert done.returncode == ExitCode.NONCONFORMING, done.stderr[-3000:]
    first = "run gemm train float32 eager"
    assert list(failures(report)) == [first]
    assert (
        "the Run call sent nothing for 15 s (after 0 progress events): hung"
        in (failures(report)[first])
    )
    results = [c["check"] for c in report["checks"]]
    after = report["checks"][results.index(first) + 1 :]
    assert after and all(c["result"] == "skip" for c in after)
    assert {c["reason"] for c in after} == {f"not run: the agent hung in {first!r}"}
    assert report["seconds"] < 60  # the done-when: under 2 minutes


def test_an_agent_silent_through_a_long_step_fails_that_check_alone(agent, monkeypatch) -> None:
    """An agent that sends a Progress only as its stage or count changes (no heartbeat): its
    steps of microseconds pass every other check, heartbeat's included; with steps made long
    enough that the declared limits allow one over the stall limit, the long-step check makes
    one and fails it, naming the step's length and the silence through it."""
    monkeypatch.setenv("FAKE_STEP_SCALE", LONG_STEPS)
    done, report = conformance(agent("per-step-progress"), "--cells", "one")
    assert done.returncode == ExitCode.NONCONFORMING, done.stdout[-3000:] + done.stderr[-3000:]
    failed = failures(report)
    assert list(failed) == [LONG_STEP], failed
    found = re.search(
        r"the step lasted ([\d.]+) s and the agent sent nothing for ([\d.]+) s of it",
        failed[LONG_STEP],
    )
    assert found, failed[LONG_STEP]
    step, silence = map(float, found.groups())
    # Silent through a step of its own (its length, give or take the relay's moment).
    assert step > MEASURE_GAP_SECONDS and LATE_SECONDS < silence <= step + 1
    assert (
        "`collector run` fails a cell silent for more than 6 s while it measures"
        in failed[LONG_STEP]
    )


def test_a_stuck_measuring_thread_fails_in_a_minute_naming_where_it_stood(agent) -> None:
    """An agent whose measuring thread never returns from its first step while its heartbeat
    goes on: the first cell fails as stuck once its progress has stood still for the
    collector's hang limit (60 s, as `collector run` cancels it), naming the stage and count,
    and the checks after it are not run, instead of each waiting out the cell timeout (300 s)
    for the same thread."""
    done, report = conformance(agent("stuck-thread"), "--cells", "one")
    assert done.returncode == ExitCode.NONCONFORMING, done.stderr[-3000:]
    first = "run gemm train float32 eager"
    assert list(failures(report)) == [first]
    reason = failures(report)[first]
    assert reason.startswith(
        "the Run call sent heartbeats but made no progress for 60 s (at first iteration, 0 "
        "iterations done)"
    ), reason
    assert (
        "`collector run` cancels a cell whose progress (stage, iterations_done) stands " in reason
    )
    results = [c["check"] for c in report["checks"]]
    after = report["checks"][results.index(first) + 1 :]
    assert after and all(c["result"] == "skip" for c in after)
    assert {c["reason"] for c in after} == {f"not run: the agent is stuck in {first!r}"}
    assert report["seconds"] < 90


def test_the_table_names_the_failing_check_and_why(agent) -> None:
    port = agent("no-result")
    env = {"COLUMNS": "250", "PATH": "/usr/bin:/bin"}
    done = run_command(port, "--checks", "cells", "--cells", "one", env=env)
    assert done.returncode == 3
    assert "run gemm train float32 eager" in done.stdout
    assert "the Run stream ended OK without a RunResult" in done.stdout
    assert "1 passed, 3 failed, 0 skipped" in done.stdout  # Describe, and the 3 cells
    # Only the cell groups and Describe's call ran.
    assert "refuse unknown workload" not in done.stdout


def test_an_agent_reached_as_name_at_address_must_say_that_name(agent) -> None:
    port = agent("honest")
    done = run_command(f"torch-cpu@127.0.0.1:{port}", "--checks", "describe", "--json")
    assert done.returncode == ExitCode.NONCONFORMING
    assert failures(json.loads(done.stdout)) == {
        "identity": "identity.name is 'fake-cpu', not 'torch-cpu' (the agent's manifest, or "
        "NAME@ of the target)"
    }


def test_an_unknown_check_group_is_bad_input(agent) -> None:
    done, _ = conformance(agent("honest"), "--checks", "describe,nonsense")
    assert done.returncode == ExitCode.NOT_STARTED
    assert "unknown check group 'nonsense'" in done.stderr


def test_an_unreachable_target_is_not_started() -> None:
    done, _ = conformance(1, "--start-timeout", "2")
    assert done.returncode == ExitCode.NOT_STARTED
    assert "cannot reach" in done.stderr


def test_a_token_agent_is_checked_with_the_run_command_s_token_option(tmp_path: Path) -> None:
    """The runtime's own server (create_server: /metrics on, a token demanded) passes with
    --agent-token-file; without it, Describe fails UNAUTHENTICATED and the suite says so."""
    token = tmp_path / "token"
    token.write_text("conformance-s3cret\n")
    agent = create_server(
        ThreadedFake(),
        name="fake-cpu",
        variant="cpu",
        security=ServerSecurity(token="conformance-s3cret"),
    )
    try:
        token_file = ("--agent-token-file", str(token))
        done, report = conformance(agent.port, "--cells", "one", *token_file, *NO_HEARTBEAT_CHECK)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        results = {c["check"]: c["result"] for c in report["checks"]}
        assert results["/metrics has the collector's series"] == "pass"
        assert results["/metrics passes promtool"] == (
            "pass" if shutil.which("promtool") else "skip"
        )
        done, report = conformance(agent.port, "--checks", "describe")
        assert done.returncode == ExitCode.NONCONFORMING
        assert "UNAUTHENTICATED" in failures(report)["Describe answers"]
    finally:
        agent.stop(0)


def test_an_interrupt_leaves_an_agent_running_elsewhere_running() -> None:
    """SIGINT mid-run against HOST:PORT: exit 130, and the message says the agent was left
    running (the suite did not start it, and cannot stop it), not that it was stopped; the
    agent still answers, its run cancelled as the suite's channel closed. An agent the suite
    started is still said to be stopped."""
    server, servicer, port = serve("honest")
    try:
        command = [sys.executable, "-m", "fwbench.collector.cli", "conformance"]
        process = subprocess.Popen(
            with_sigint([*command, f"127.0.0.1:{port}", "--checks", "heartbeat"]),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while servicer._active is None:  # the heartbeat check's run (17 s) has begun
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == ExitCode.INTERRUPTED, stderr
        assert f"error: interrupted; the agent at 127.0.0.1:{port} was left running" in stderr
        assert "was stopped" not in stderr and "Traceback" not in stderr
        deadline = time.monotonic() + 20
        while servicer._active is not None:  # the suite's run is cancelled, the agent idle
            assert time.monotonic() < deadline, "the agent's run went on"
            time.sleep(0.05)
        client = AgentClient("agent", f"127.0.0.1:{port}", None)
        try:
            assert client.describe(5).identity.name == "fake-cpu"  # still running
        finally:
            client.close()
    finally:
        server.stop(0)
    assert interrupted("numpy-cpu") == "interrupted; the agent was stopped"
    assert interrupted("agent@10.0.0.5:50051").endswith("agent at 10.0.0.5:50051 was left running")


def test_the_suite_frozen_itself_does_not_blame_the_agent() -> None:
    """The suite's own process stopped (SIGSTOP) for 6 s in the heartbeat check, longer than
    two heartbeat intervals: the honest agent's Progress waits unread meanwhile, and the check
    still passes (the suite's own freeze is not the agent's silence, run/own_clock.py)."""
    server, servicer, port = serve("honest")
    try:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fwbench.collector.cli",
                "conformance",
                f"127.0.0.1:{port}",
                "--checks",
                "heartbeat",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while servicer._active is None:  # the heartbeat check's run (17 s) has begun
            assert process.poll() is None and time.monotonic() < deadline, process.communicate()
            time.sleep(0.05)
        time.sleep(3)  # measuring
        process.send_signal(signal.SIGSTOP)
        time.sleep(6)
        process.send_signal(signal.SIGCONT)
        stdout, stderr = process.communicate(timeout=120)
    finally:
        server.stop(0)
    assert process.returncode == 0, stdout + stderr
    checks = {c["check"]: c for c in json.loads(stdout)["checks"]}
    check = checks["heartbeat: a Progress every 2 s for 17 s"]
    assert check["result"] == "pass", check
