"""An agent running as a Slurm batch job (slurm.py's launcher submits it): alive while the
job runs, stopped by ending the job, named by its job and node in the results."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from fwbench.collector.launchers.base import AgentHandle, LauncherKind
from fwbench.collector.launchers.slurm_jobs import end_jobs, job_state, job_status


@dataclass
class SlurmAgent(AgentHandle):
    """An agent running as a Slurm job this collector submitted."""

    kind: ClassVar[str] = LauncherKind.SLURM.value
    sees_files: ClassVar[bool] = True  # the cluster's shared filesystem
    LOG_NOISE: ClassVar[tuple[str, ...]] = ("srun:", "slurmstepd")  # "slurmstepd-NODE: ..."

    job_id: str = ""
    node: str = ""
    partition: str = ""
    python: Path | None = None
    existing: bool = False
    image: str = ""  # --slurm-container: the image the job ran the agent in

    def alive(self) -> bool:
        return job_state(self.job_id) in ("RUNNING", "COMPLETING")

    def exit_reason(self) -> str:
        status = job_status(self.job_id)
        return f"Slurm job {self.job_id} on {self.node or '?'}: {status}{self._log_tail()}"

    def stop(self, grace_seconds: float = 10.0) -> None:
        self.client.close()
        if self.job_id and job_state(self.job_id):
            # COMPLETED when the agent ends on SIGTERM
            end_jobs([self.job_id], grace_seconds)

    def identity(self) -> dict[str, Any]:
        source = "image" if self.image else "existing" if self.existing else "built"
        return {
            **super().identity(),
            "environment_source": source,
            "agent_python": str(self.python or ""),
            "node": self.node,
            "scheduler_job": f"slurm:{self.job_id}",
            **({"image": self.image} if self.image else {}),
        }

    def metadata(self) -> dict[str, Any]:
        return {
            **super().metadata(),
            "slurm_job": self.job_id,
            "node": self.node,
            "partition": self.partition,
        }
