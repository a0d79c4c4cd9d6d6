"""An agent process that SIGKILL does not let the collector reap (traced by a debugger, or in
uninterruptible sleep) no longer holds the collector: stop() waits KILL_WAIT_SECONDS after
SIGKILL, says which agent and pid it leaves and what /proc says of it, and returns. Real
processes: the agent is traced with ptrace by another process that never reaps it (a tracee's
exit is the tracer's to collect first), so its parent's wait cannot end until the test lets
the tracer go."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import reaping
from fwbench.collector.launchers.local import ProcessAgent

# Far beyond the grace and the kill wait the test gives stop(), whatever the host's load.
STOP_LIMIT_SECONDS = 120
# Lets any process trace it (Yama's ptrace_scope 1 allows only ancestors otherwise), ignores
# SIGTERM as a stuck agent would, says it is ready.
AGENT = """
import ctypes, signal, time
ctypes.CDLL(None).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)  # PR_SET_PTRACER, ANY
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(600)
"""
TRACER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
if libc.ptrace(16, int(sys.argv[1]), None, None) != 0:  # PTRACE_ATTACH
    print("refused:", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(1)
print("attached", flush=True)
time.sleep(600)  # never waits for its tracee: the tracee's exit stays uncollected
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-c", code, *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _status(pid: int) -> dict[str, str]:
    text = Path(f"/proc/{pid}/status").read_text()
    return {key: value.strip() for key, value in (line.split(":", 1) for line in text.splitlines())}


def _handle(process: subprocess.Popen[str]) -> ProcessAgent:
    handle = ProcessAgent(Instance("stuck"), "", AgentClient("stuck", "unset"))
    handle.process = process  # type: ignore[assignment]  # text pipes: the same process
    return handle


@pytest.fixture
def agent() -> Iterator[subprocess.Popen[str]]:
    process = _python(AGENT)
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    yield process
    process.kill()
    process.wait(timeout=60)
    process.stdout.close()


def test_an_agent_traced_by_another_process_is_left_after_the_kill_wait(
    agent: subprocess.Popen[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tracer = _python(TRACER, str(agent.pid))
    try:
        assert tracer.stdout is not None
        said = tracer.stdout.readline().strip()
        if said != "attached":
            pytest.skip(f"this host does not let a process trace another: {said}")
        deadline = time.monotonic() + 60  # ptrace stops the tracee: /proc says when
        while _status(agent.pid)["State"][0] != "t":
            assert time.monotonic() < deadline, _status(agent.pid)
            time.sleep(0.05)
        monkeypatch.setattr(reaping, "KILL_WAIT_SECONDS", 0.5)
        # In a thread: a stop() that waits without limit fails here instead of hanging.
        stopping = threading.Thread(target=_handle(agent).stop, args=(0.2,), daemon=True)
        stopping.start()
        stopping.join(timeout=STOP_LIMIT_SECONDS)
        assert not stopping.is_alive(), f"stop() still waits {STOP_LIMIT_SECONDS} s on"
        assert agent.poll() is None  # killed, and not reaped: stop() returned anyway
        warning = capsys.readouterr().err
        assert warning.startswith(
            f"warning: agent stuck (pid {agent.pid}) did not exit 0.5 s after SIGKILL; leaving "
            f"it: state Z (zombie), traced by pid {tracer.pid}"
        ), warning
    finally:
        tracer.kill()
        tracer.wait(timeout=60)
        assert tracer.stdout is not None
        tracer.stdout.close()
    assert agent.wait(timeout=60) == -signal.SIGKILL  # its tracer gone, the kill is collected


def test_an_agent_that_ignores_sigterm_is_killed_and_reaped_without_a_warning(
    agent: subprocess.Popen[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _handle(agent).stop(grace_seconds=0.2)
    assert agent.returncode == -signal.SIGKILL
    assert capsys.readouterr().err == ""
