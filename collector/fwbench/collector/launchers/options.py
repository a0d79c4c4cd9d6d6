"""A launcher's own options: what `collector run` takes for one launcher only (--python,
--cpuset, --slurm, --k8s, ...). Each launcher declares a frozen dataclass of them, a
LauncherOptions subclass named by its Launcher's `options` attribute, so the registry
(launchers/__init__.py) is the one list: `launcher_options` refuses a flag of another
launcher (naming the launchers it goes with) and hands the rest to the chosen one's `parse`.
The fields are recorded with the run (run.json "options") and read back on --resume."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from fwbench.collector.agents.manifest import AgentManifest


class LaunchOptionError(ValueError):
    """A launcher option refused; `flag` names it as the command line does."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(message)
        self.flag = flag


@dataclass(frozen=True)
class Flag:
    """A command-line flag of a launcher: its name, its value when not given, and how it is
    refused with another launcher ({kinds}: the launchers it goes with)."""

    name: str
    default: Any = None
    refusal: str = "{flag} goes with --launcher {kinds}"

    def given(self, value: Any) -> bool:
        return value not in (None, "", [], ()) and value != self.default


@dataclass(frozen=True)
class OptionContext:
    """What a launcher's options are checked against: the declared agents the run names, and
    every declared manifest."""

    agents: frozenset[str] = frozenset()
    declared: Mapping[str, AgentManifest] = dataclasses.field(default_factory=dict)


class Recorded:
    """A frozen dataclass recorded with a run (run.json "options") field by field, tuples as
    lists, and read back by name, a field the record lacks (a run recorded before it existed)
    at its default: a launcher's options, and a run's parts (run/options.py)."""

    def record(self) -> dict[str, Any]:
        return {
            field.name: list(value)
            if isinstance(value := getattr(self, field.name), tuple)
            else value
            for field in dataclasses.fields(self)  # type: ignore[arg-type]
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        values = {
            field.name: tuple(record[field.name])
            if isinstance(field.default, tuple)
            else record[field.name]
            for field in dataclasses.fields(cls)  # type: ignore[arg-type]
            if field.name in record
        }
        return cls(**values)


@dataclass(frozen=True)
class LauncherOptions(Recorded):
    """No options (a launcher that takes none). A subclass declares its fields, the FLAGS they
    come from (parameter name -> Flag) and a `parse` from those flags' values."""

    FLAGS: ClassVar[Mapping[str, Flag]] = {}

    @classmethod
    def parse(cls, given: Mapping[str, Any], context: OptionContext) -> Self:
        """These options from the values of FLAGS (parameter name -> value, each present);
        raises LaunchOptionError for one that cannot hold."""
        return cls()

    def threads_per_rank(self) -> int:
        """CPUs a scheduler gives each rank (--slurm cpus-per-task=N, --k8s cpus=N); 0 = none
        said: the host's are shared."""
        return 0
