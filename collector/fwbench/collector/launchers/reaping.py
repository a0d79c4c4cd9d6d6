"""Stopping an agent process this collector started: SIGTERM, SIGKILL after a grace period,
then a bounded wait for it to be reaped. A process that SIGKILL does not end within
KILL_WAIT_SECONDS is left, with a warning on stderr naming the agent, its pid and what /proc
says of it, and the collector goes on: one in uninterruptible sleep (state D: a driver, a
dead network mount) dies only when the kernel lets it, and one traced (a debugger, strace) is
reaped by its tracer first. Waiting for it without limit held a run silent for minutes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KILL_WAIT_SECONDS = 15.0


def stop_process(process: subprocess.Popen[bytes], name: str, grace_seconds: float) -> None:
    """Stops `process` (agent `name`): SIGTERM, SIGKILL after `grace_seconds`; returns once
    it is reaped, or KILL_WAIT_SECONDS after SIGKILL with a warning."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(grace_seconds)
        return
    except subprocess.TimeoutExpired:
        process.kill()
    try:
        process.wait(KILL_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        print(
            f"warning: agent {name} (pid {process.pid}) did not exit {KILL_WAIT_SECONDS:g} s "
            f"after SIGKILL; leaving it: {unreaped(process.pid)}",
            file=sys.stderr,
        )


def unreaped(pid: int) -> str:
    """Why a killed process may not be reaped yet, from /proc/PID/status: its state, its
    tracer if it has one."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "uninterruptible (state D) or traced?"
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    state, tracer = fields.get("State", "?").strip(), fields.get("TracerPid", "0").strip()
    if tracer not in ("", "0"):
        return f"state {state}, traced by pid {tracer} (its tracer reaps it first)"
    if state.startswith("D"):
        return f"state {state}: uninterruptible, in the kernel (a driver, a dead mount)"
    return f"state {state}: uninterruptible (state D) or traced?"
