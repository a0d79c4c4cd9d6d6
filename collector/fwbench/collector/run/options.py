"""A run's options, in parts: its limits, its telemetry, how its agents start (the launcher
and the launcher's own options), how it decides (--until-decided), and the credentials of
attached agents; and their record in the run's metadata, from which `collector run
--resume` takes them back. What to measure is the run's Selection (run/plan.py)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers import LauncherKind, LauncherOptions, recorded_options
from fwbench.collector.launchers.base import START_TIMEOUT_SECONDS
from fwbench.collector.launchers.options import Recorded
from fwbench.collector.run.defaults import CELL_TIMEOUT_SECONDS as CELL_TIMEOUT_SECONDS
from fwbench.collector.run.defaults import (
    DEFAULT_INTERVAL_SECONDS,
    DEFAULT_THRESHOLD_PERCENT,
    HANG_SECONDS,
)
from fwbench.collector.stats.margins import SpreadOf
from fwbench.collector.stats.significance import DEFAULT_NOISE_FLOOR

if TYPE_CHECKING:
    from fwbench.collector.run.model_file import ModelAsked


@dataclass(frozen=True)
class Limits(Recorded):
    """How long an agent may take to start, a cell to run (None: for ever), and an agent to
    stay silent (no heartbeat, no progress) before it counts as hung (None: the cell's
    limit only)."""

    cell_timeout_seconds: float | None = CELL_TIMEOUT_SECONDS
    start_timeout_seconds: float = START_TIMEOUT_SECONDS
    hang_timeout_seconds: float | None = HANG_SECONDS


@dataclass(frozen=True)
class Telemetry(Recorded):
    """Seconds between /metrics scrapes during each cell (None: no scraping); interference
    (run/interference.py): the percent of the agent's CPUs others may take before a row is
    interfered, and the most seconds to wait for a quiet host before each cell."""

    scrape_interval_seconds: float | None = DEFAULT_INTERVAL_SECONDS
    interference_threshold: float = DEFAULT_THRESHOLD_PERCENT
    quiet_host_seconds: float = 0.0


@dataclass(frozen=True)
class Launch:
    """How agents given by name start: the launcher and its own options (launchers/
    options.py); extra manifest folders (--manifests); the ids of images whose labels declare
    agents of the run (a resumed run starts those very images again); and the variables every
    agent the run starts gets (--agent-env)."""

    launcher: LauncherKind = LauncherKind.LOCAL
    options: LauncherOptions | None = None  # None: the launcher's defaults
    manifest_dirs: tuple[str, ...] = ()
    images: tuple[str, ...] = ()
    agent_environment: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def own(self) -> LauncherOptions:
        return self.options or recorded_options(self.launcher, {})

    def record(self) -> dict[str, Any]:
        return {
            "launcher": self.launcher.value,
            "manifest_dirs": list(self.manifest_dirs),
            "images": list(self.images),
            "agent_environment": dict(self.agent_environment),
            **self.own.record(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Launch:
        launcher = LauncherKind(record.get("launcher", LauncherKind.LOCAL.value))
        return cls(
            launcher,
            recorded_options(launcher, record),
            tuple(record.get("manifest_dirs", ())),
            tuple(record.get("images", ())),
            dict(record.get("agent_environment", {})),
        )


@dataclass(frozen=True)
class Decision(Recorded):
    """--until-decided (run/decide.py): the budget in seconds (None: a plain run), the agent
    every other is compared with, the noise floor and the equivalence margin (None: each
    comparison's from this host's earlier runs, stats/margins.py)."""

    until_decided_seconds: float | None = None
    baseline: str = ""
    noise_floor: float = DEFAULT_NOISE_FLOOR
    margin: float | None = None


@dataclass(frozen=True)
class RunOptions:
    """The agents of a run, where its results go, the command that asked for it, and its
    parts. Not recorded: where results go, the command line and the credentials of attached
    agents are the resuming command's own; the host's calibration is recorded on its own
    (metadata "calibration") and a resumed run keeps it."""

    agents: tuple[Instance, ...]
    out_dir: Path | None
    store_path: Path
    command_line: str
    limits: Limits = Limits()
    telemetry: Telemetry = Telemetry()
    launch: Launch = Launch()
    decision: Decision = Decision()
    security: ChannelSecurity | None = None  # token and TLS of attached agents (NAME@HOST:PORT)
    # (run id, its metadata) -> the spreads this host's earlier runs measured, by result row
    # (analysis/history.py's earlier_history), for the decision's margins.
    history: Callable[[str, dict[str, Any]], SpreadOf] | None = None
    # This host's ceilings (calibration/cache.py), asked for before the agents start.
    calibration: Callable[[], dict[str, Any] | None] | None = None
    # --model: the user's model file, checked (run/model_file.py); None: the catalogue only.
    model: ModelAsked | None = None

    def calibration_now(self) -> dict[str, Any] | None:
        return self.calibration() if self.calibration else None

    def with_calibration(self, resumed: dict[str, Any] | None) -> RunOptions:
        """These options with the run's calibration settled now, before any agent starts (the
        machine is quieter than with agents up): a resumed run's own (from its metadata, raised
        ceilings included), else this host's (cached, or measured now)."""
        calibration = resumed.get("calibration") if resumed is not None else self.calibration_now()
        return dataclasses.replace(self, calibration=lambda: calibration)


def options_record(options: RunOptions) -> dict[str, Any]:
    """The options as JSON for the run's metadata: one flat object, each part's fields (as
    runs have recorded them since resuming began)."""
    return {
        "agents": [instance.spec for instance in options.agents],
        **options.limits.record(),
        **options.telemetry.record(),
        **options.launch.record(),
        **options.decision.record(),
        **({"model": options.model.record()} if options.model else {}),
    }


def options_from_record(
    record: dict[str, Any],
    out_dir: Path,
    store_path: Path,
    command_line: str,
    security: ChannelSecurity | None = None,
) -> RunOptions:
    """The options a run recorded (options_record), for resuming it. Raises AgentSpecError for
    an agent spec that is not one."""
    return RunOptions(
        tuple(Instance.from_spec(str(spec)) for spec in record["agents"]),
        out_dir,
        store_path,
        command_line,
        Limits.from_record(record),
        Telemetry.from_record(record),
        Launch.from_record(record),
        Decision.from_record(record),
        security,
        model=_model(record.get("model")),
    )


def _model(record: dict[str, Any] | None) -> ModelAsked | None:
    """A resumed run's model file, checked again: the same file, or ModelRefused."""
    if record is None:
        return None
    from fwbench.collector.run.model_file import ModelRefused, asked_model

    inputs = [f"{name}={'x'.join(map(str, shape))}" for name, shape in record["inputs"].items()]
    sample = Path(record["sample"]) if record.get("sample") else None
    asked = asked_model(Path(record["path"]), inputs, bool(record.get("export")), sample)
    if sample is not None and asked.sample_sha256 != record["sample_sha256"]:
        raise ModelRefused(
            f"--inputs {sample} changed since the run measured it: resume feeds the same inputs"
        )
    if asked.sha256 != record["sha256"]:
        raise ModelRefused(
            f"--model {record['path']} changed since the run measured it (digest "
            f"{asked.sha256[:12]}..., was {record['sha256'][:12]}...): resume measures the same "
            "file"
        )
    return asked
