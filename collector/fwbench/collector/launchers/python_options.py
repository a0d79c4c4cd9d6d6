"""The local launcher's own option, which the Slurm launcher takes too: `--python`, agents
run by an existing interpreter (a conda or cluster environment), by agent name ("" = every
agent). Checked (the agent declared, the file executable) before any agent starts."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from fwbench.collector.agents.existing import parse_pythons
from fwbench.collector.launchers.options import Flag, LauncherOptions, OptionContext

PYTHON = Flag(
    "--python", refusal="{flag} runs agents in an existing Python: it goes with --launcher {kinds}"
)


@dataclass(frozen=True)
class PythonOptions(LauncherOptions):
    """Existing interpreters, by agent name ("" = every agent): absolute paths."""

    FLAGS: ClassVar[Mapping[str, Flag]] = {"python": PYTHON}

    pythons: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, given: Mapping[str, Any], context: OptionContext) -> Self:
        """Raises EnvironmentUnsuitable for an unknown agent or a missing interpreter."""
        return cls(pythons=parse_pythons(list(given.get("python") or []), dict(context.declared)))

    def python_for(self, agent: str) -> str:
        """The interpreter `agent` runs with ("" = an environment the collector makes)."""
        return self.pythons.get(agent) or self.pythons.get("") or ""
