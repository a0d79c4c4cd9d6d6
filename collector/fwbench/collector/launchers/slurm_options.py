"""The Slurm launcher's own options (`collector run --launcher slurm`): sbatch options for
every agent's jobs or one agent's (--slurm), the container runtime its agents run in
(--slurm-container) and existing interpreters (--python), checked before anything is
submitted (docs/cluster.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from fwbench.collector.launchers.options import Flag, LaunchOptionError, OptionContext
from fwbench.collector.launchers.python_options import PythonOptions
from fwbench.collector.launchers.slurm_jobs import scoped
from fwbench.collector.launchers.slurm_scripts import Container

# sbatch options the launcher sets itself; --slurm cannot override them.
RESERVED = frozenset({"parsable", "job-name", "output", "comment", "wrap", "export"})
# sbatch options that the shape of what runs sets: one would contradict it (--slurm ntasks=1
# once silently made a world of 2 one task).
SHAPED = {"ntasks": "is what the world size says (--world-sizes; an agent alone is one task)"}
# Options another of the run's own does right.
REPLACED = {
    "container": "would start the host environment's interpreter inside an OCI bundle, which "
    "holds no such path: run agents in their images with --slurm-container RUNTIME=REGISTRY",
}
# Options the run reads for every agent at once: one agent's own would leave the others' wrong.
PER_RUN = {"cpus-per-task": "sizes every rank's threads in the run (--world-sizes)"}


@dataclass(frozen=True)
class SlurmOptions(PythonOptions):
    """sbatch options without their dashes ("partition=debug", "torch-cu12:gres=gpu:1"), and
    the runtime that runs each agent in its image (RUNTIME=REGISTRY; "" = none: the host's)."""

    FLAGS: ClassVar[Mapping[str, Flag]] = {
        **PythonOptions.FLAGS,
        "slurm": Flag("--slurm", refusal="{flag} options go with --launcher {kinds}"),
        "slurm_container": Flag(
            "--slurm-container",
            refusal="{flag} runs agents in their images: it goes with --launcher {kinds}",
        ),
    }

    slurm_options: tuple[str, ...] = ()
    slurm_container: str = ""

    @classmethod
    def parse(cls, given: Mapping[str, Any], context: OptionContext) -> Self:
        pythons = super().parse(given, context).pythons
        options = tuple(check_sbatch_options(given.get("slurm") or [], context.agents))
        container = given.get("slurm_container") or ""
        if container:
            check_container(container, bool(pythons))
        return cls(pythons=pythons, slurm_options=options, slurm_container=container)

    def threads_per_rank(self) -> int:
        for option in self.slurm_options:
            name, _, value = option.partition("=")
            if name == "cpus-per-task" and value.isdigit() and int(value) > 0:
                return int(value)
        return 0

    def container(self) -> Container | None:
        return Container.parse(self.slurm_container) if self.slurm_container else None


def check_sbatch_options(given: list[str], agents: frozenset[str]) -> list[str]:
    """--slurm options: sbatch long options without their dashes, for every agent or, as
    AGENT:OPTION, for one of `agents` (the agents the run names); not the launcher's own.
    Raises LaunchOptionError."""
    for option in given:
        agent, option = scoped(option)
        if agent and agent not in agents:
            raise _refused(
                f"{agent}:{option}: {agent} is not an agent of this run "
                f"({', '.join(sorted(agents)) or 'none'})"
            )
        name = option.partition("=")[0]
        if agent and name in PER_RUN:
            raise _refused(f"{agent}:{option}: --{name} {PER_RUN[name]}: give it for every agent")
        if not name or not name.replace("-", "").isalnum():
            raise _refused(f"{option!r}: expected NAME or NAME=VALUE")
        if name in REPLACED:
            raise _refused(f"--{name} {REPLACED[name]}")
        if name in SHAPED:
            raise _refused(f"--{name} {SHAPED[name]}, so it cannot be given")
        if name in RESERVED:
            raise _refused(f"--{name} is the launcher's own (it names, logs and tracks each job)")
    return given


def check_container(given: str, pythons: bool) -> None:
    """--slurm-container: RUNTIME=REGISTRY, and not with --python."""
    if pythons:
        raise LaunchOptionError(
            "--slurm-container",
            "an agent runs in its image or in an existing Python (--python), not both",
        )
    try:
        Container.parse(given)
    except ValueError as error:
        raise LaunchOptionError("--slurm-container", str(error)) from None


def _refused(message: str) -> LaunchOptionError:
    return LaunchOptionError("--slurm", message)


__all__ = ["RESERVED", "SlurmOptions", "check_sbatch_options"]
