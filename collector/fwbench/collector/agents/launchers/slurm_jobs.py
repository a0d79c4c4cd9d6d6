"""The Slurm jobs of fwbench collectors: their state, and cancelling them by run or when their
collector is gone (launchers/slurm.py). Each job's comment is fwbench:HOST:PID:RUN_ID."""

from __future__ import annotations

import socket
import subprocess
from typing import Any

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.launchers.base import process_exists

COMMENT_PREFIX = "fwbench"
POLL_SECONDS = 0.5


def slurm_command(*args: str, timeout: float = 30) -> str:
    """A Slurm command's stdout; raises AgentUnavailable with its stderr when it fails."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise AgentUnavailable(f"{args[0]} failed: {error}") from None
    if done.returncode != 0:
        raise AgentUnavailable(f"{' '.join(args[:2])} failed: {done.stderr.strip()[:500]}")
    return done.stdout.strip()


def job_state(job_id: str) -> str:
    """RUNNING, PENDING, ... or "" once Slurm no longer lists the job (it ended)."""
    try:
        return slurm_command("squeue", "-h", "-j", job_id, "-o", "%T")
    except AgentUnavailable:
        return ""


def cancel_jobs(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30, check=False)


def _our_jobs(chosen: Any) -> list[str]:
    try:
        listed = slurm_command("squeue", "-h", "-o", "%i|%k")
    except AgentUnavailable:
        return []  # no cluster reachable: nothing of ours can be running there
    jobs = []
    for line in listed.splitlines():
        job_id, _, comment = line.partition("|")
        parts = comment.split(":")
        if len(parts) == 4 and parts[0] == COMMENT_PREFIX and chosen(*parts[1:]):
            jobs.append(job_id.strip())
    return jobs


def cancel_run_jobs(run_id: str) -> None:
    cancel_jobs(_our_jobs(lambda host, pid, run: run == run_id))


def cancel_orphans() -> None:
    """Cancels jobs that collectors on this host submitted and that outlived them."""

    def orphaned(host: str, pid: str, run: str) -> bool:
        return host == socket.gethostname() and pid.isdigit() and not process_exists(int(pid))

    cancel_jobs(_our_jobs(orphaned))
