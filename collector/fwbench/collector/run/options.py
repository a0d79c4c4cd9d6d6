"""A run's options (how agents start, time limits, scraping, container limits), and their
record in the run's metadata, from which `collector run --resume` takes them back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import DEFAULT_PIDS_LIMIT, LauncherKind
from fwbench.collector.run.interference import DEFAULT_THRESHOLD_PERCENT
from fwbench.collector.run.liveness import HANG_SECONDS
from fwbench.collector.run.telemetry import DEFAULT_INTERVAL_SECONDS
from fwbench.collector.stats.margins import SpreadOf
from fwbench.collector.stats.significance import DEFAULT_NOISE_FLOOR

# Not recorded: where results go, the command line and the credentials for attached agents
# (never written down) are the resuming command's own.
# The host's calibration is recorded on its own (metadata "calibration"), and a resumed run
# keeps it.
_NOT_RECORDED = (
    "out_dir", "store_path", "command_line", "security", "calibration", "history",
)  # fmt: skip


@dataclass(frozen=True)
class RunOptions:
    agents: tuple[Instance, ...]
    out_dir: Path | None
    store_path: Path
    cell_timeout_seconds: float | None
    start_timeout_seconds: float
    command_line: str
    # Seconds between /metrics scrapes during each cell; None turns scraping off.
    scrape_interval_seconds: float | None = DEFAULT_INTERVAL_SECONDS
    # Seconds without a heartbeat before an agent counts as hung; None = only the cell timeout.
    hang_timeout_seconds: float | None = HANG_SECONDS
    # Interference (run/interference.py): the percent of the agent's CPUs others may take
    # before a row is interfered; the most seconds to wait for a quiet host before each cell.
    interference_threshold: float = DEFAULT_THRESHOLD_PERCENT
    quiet_host_seconds: float = 0.0
    launcher: LauncherKind = LauncherKind.LOCAL  # how agents given by name are started
    cpuset: str = ""  # docker: CPUs each container is pinned to ("0-1"); "" = all
    memory: str = ""  # docker: each container's memory limit ("8g"); "" = the default share
    pids_limit: int = DEFAULT_PIDS_LIMIT  # docker: each container's process limit
    slurm_options: tuple[str, ...] = ()  # slurm: sbatch options ("partition=debug")
    slurm_container: str = ""  # slurm: RUNTIME=REGISTRY, each agent in its image
    k8s_options: tuple[str, ...] = ()  # kubernetes: KEY=VALUE ("namespace=bench")
    manifest_dirs: tuple[str, ...] = ()  # extra manifest folders (--manifests)
    # --python: existing interpreters of local agents, by agent name ("" = every agent).
    pythons: dict[str, str] = dataclasses.field(default_factory=dict)
    # Ids of the images whose labels declare agents of the run (image references in --agents):
    # a resumed run starts those very images again.
    images: tuple[str, ...] = ()
    # --agent-env: variables every agent the run starts gets (agents/agent_environment.py).
    agent_environment: dict[str, str] = dataclasses.field(default_factory=dict)
    # --until-decided (run/decide.py): the budget in seconds (None: a plain run), the agent
    # every other is compared with, the noise floor and the equivalence margin (None: each
    # comparison's from this host's earlier runs, stats/margins.py).
    until_decided_seconds: float | None = None
    baseline: str = ""
    noise_floor: float = DEFAULT_NOISE_FLOOR
    margin: float | None = None
    # (run id, its metadata) -> the spreads this host's earlier runs measured, by result row
    # (analysis/history.py's earlier_history), for those margins.
    history: Callable[[str, dict[str, Any]], SpreadOf] | None = None
    security: ChannelSecurity | None = None  # token and TLS of attached agents (NAME@HOST:PORT)
    # This host's ceilings (calibration/cache.py), asked for before the agents start.
    calibration: Callable[[], dict[str, Any] | None] | None = None

    def calibration_now(self) -> dict[str, Any] | None:
        return self.calibration() if self.calibration else None

    def with_calibration(self, resumed: dict[str, Any] | None) -> RunOptions:
        """These options with the run's calibration settled now, before any agent starts (the
        machine is quieter than with agents up): a resumed run's own (from its metadata, raised
        ceilings included), else this host's (cached, or measured now)."""
        calibration = resumed.get("calibration") if resumed is not None else self.calibration_now()
        return dataclasses.replace(self, calibration=lambda: calibration)


def options_record(options: RunOptions) -> dict[str, Any]:
    """The options as JSON for the run's metadata."""
    record = {
        field.name: getattr(options, field.name)
        for field in dataclasses.fields(options)
        if field.name not in _NOT_RECORDED
    }
    record["launcher"] = options.launcher.value
    record["agents"] = [instance.spec for instance in options.agents]
    record["manifest_dirs"] = list(options.manifest_dirs)
    record["images"] = list(options.images)
    record["slurm_options"] = list(options.slurm_options)
    record["k8s_options"] = list(options.k8s_options)
    return record


def options_from_record(
    record: dict[str, Any],
    out_dir: Path,
    store_path: Path,
    command_line: str,
    security: ChannelSecurity | None = None,
) -> RunOptions:
    """The options a run recorded (options_record), for resuming it. Raises AgentSpecError for
    an agent spec that is not one."""
    known = {f.name for f in dataclasses.fields(RunOptions)} - set(_NOT_RECORDED)
    values = {key: value for key, value in record.items() if key in known}
    values["launcher"] = LauncherKind(values.get("launcher", LauncherKind.LOCAL.value))
    values["agents"] = tuple(Instance.from_spec(str(spec)) for spec in values["agents"])
    values["manifest_dirs"] = tuple(values.get("manifest_dirs", ()))
    values["pythons"] = dict(values.get("pythons", {}))
    values["agent_environment"] = dict(values.get("agent_environment", {}))
    values["images"] = tuple(values.get("images", ()))
    values["slurm_options"] = tuple(values.get("slurm_options", ()))
    values["k8s_options"] = tuple(values.get("k8s_options", ()))
    return RunOptions(out_dir=out_dir, store_path=store_path, command_line=command_line, **values)
