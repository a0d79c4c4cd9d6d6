"""The Slurm jobs of fwbench collectors: their state, and cancelling them by run or when their
collector is gone (launchers/slurm.py). Each job's comment is fwbench:HOST:PID:RUN_ID."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from typing import Any

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.launchers.base import process_exists

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


def job_status(job_id: str) -> str:
    """What a job is doing in Slurm's words, with its reason: "PENDING (Resources)",
    "RUNNING"; for a job Slurm no longer queues, how it ended as slurmctld still remembers it
    (for MinJobAge): "NODE_FAIL (node n1 is down: Not responding)", "FAILED
    (NonZeroExitCode)", "COMPLETED"; "ended" once it is forgotten."""
    try:
        listed = slurm_command("squeue", "-h", "-j", job_id, "-o", "%T|%r")
    except AgentUnavailable:
        listed = ""
    if listed and "|" in listed:
        state, _, reason = listed.partition("|")
        return state + (f" ({reason})" if reason and reason != "None" else "")
    try:
        shown = slurm_command("scontrol", "-o", "show", "job", job_id)
    except AgentUnavailable:
        return "ended"
    fields = dict(item.partition("=")[::2] for item in shown.split())
    state, reason = fields.get("JobState") or "ended", fields.get("Reason", "None")
    nodes = fields.get("NodeList") or ""
    if state == "NODE_FAIL" and nodes and nodes != "(null)":
        reason = f"node {nodes} is {node_state(nodes)}"
    return state + (f" ({reason})" if reason and reason != "None" else "")


def node_state(node: str) -> str:
    """ "down: Not responding", "idle", ... (sinfo's state and reason), "?" unknown."""
    try:
        shown = slurm_command("sinfo", "-h", "-n", node, "-o", "%T|%E")
    except AgentUnavailable:
        return "?"
    state, _, reason = (shown.splitlines() or ["?"])[0].partition("|")
    return state + (f": {reason}" if reason and reason != "none" else "")


def cancel_jobs(job_ids: list[str]) -> None:
    if job_ids:
        subprocess.run(["scancel", *job_ids], capture_output=True, timeout=30, check=False)


def end_jobs(job_ids: list[str], grace_seconds: float) -> None:
    """Ends jobs the way a finished program ends: SIGTERM to the batch script
    (`scancel --batch --signal=TERM`), so the job ends COMPLETED in Slurm's accounting, not
    CANCELLED. One agent's script is the agent, which stops and exits 0 on it; a world's
    script ends its ranks' srun step and exits 0, or 1 when a rank had died by itself just
    before (slurm_scripts.until_ended). A job not
    running yet is cancelled (scancel would wait to signal it). What has not ended after
    `grace_seconds` is cancelled, then killed."""
    running = [job for job in job_ids if job_state(job) == "RUNNING"]
    cancel_jobs([job for job in job_ids if job not in running])
    if running:
        command = ["scancel", "--batch", "--signal=TERM", *running]
        with contextlib.suppress(subprocess.TimeoutExpired):  # cancelled below
            subprocess.run(command, capture_output=True, timeout=30, check=False)
    deadline = time.monotonic() + grace_seconds
    while any(job_state(job) for job in job_ids) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    left = [job for job in job_ids if job_state(job)]
    cancel_jobs(left)
    deadline = time.monotonic() + 10
    while any(job_state(job) for job in left) and time.monotonic() < deadline:
        time.sleep(POLL_SECONDS)
    left = [job for job in left if job_state(job)]
    if left:
        subprocess.run(["scancel", "-s", "KILL", *left], capture_output=True, check=False)


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


def scoped(option: str) -> tuple[str, str]:
    """(agent, option) of a --slurm option: `torch-cu12:partition=gpu` applies to that agent's
    jobs alone, `partition=cpu` to every agent's (agent ""). A ':' counts only before the
    first '=' (`container=docker://image:tag` is one option for every agent)."""
    name, equals, _ = option.partition("=")
    agent, colon, rest = name.partition(":")
    if not colon:
        return "", option
    return agent, rest + option[len(name) :] if equals else rest


def options_for(agent: str, options: tuple[str, ...] | list[str]) -> list[str]:
    """The sbatch options of `agent`'s jobs: every agent's first, then its own, so that its
    own win (sbatch takes the last of an option given twice)."""
    found = [scoped(option) for option in options]
    return [o for a, o in found if not a] + [o for a, o in found if a == agent]
