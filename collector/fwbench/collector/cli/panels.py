"""`--help` in sections: each option of a command placed in a named panel (Typer's
rich_help_panel), in one table per command rather than on every option, so the command's
source stays as it is and a new option that is not placed fails at import, not silently in a
catch-all panel."""

from __future__ import annotations

import copy
import inspect
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar

from typer.models import ParameterInfo

Command = TypeVar("Command", bound=Callable[..., Any])

# `collector run`: what to measure, how long, how sure, where the agents run, what is watched,
# and the run's own files and security (docs/cli.md shows the same sections).
RUN_PANELS: Mapping[str, Sequence[str]] = {
    "What to measure": (
        "agents",
        "workloads",
        "model",
        "model_input",
        "sample",
        "export",
        "phases",
        "batch_sizes",
        "dtypes",
        "threads",
        "modes",
        "param",
        "seed",
        "profile",
    ),
    "How long each cell runs": (
        "warmup",
        "iterations",
        "min_seconds",
        "max_iterations",
        "cell_timeout",
        "start_timeout",
        "hang_timeout",
    ),
    "Repetitions and decisions": (
        "repeat",
        "fresh_process",
        "aa",
        "until_decided",
        "budget",
        "baseline",
        "margin",
    ),
    "Distributed worlds": ("world_sizes", "strategies"),
    "Where agents run": (
        "launcher",
        "python",
        "agent_env",
        "manifests",
        "slurm",
        "slurm_export",
        "slurm_container",
        "k8s",
        "cpuset",
        "memory",
        "pids_limit",
    ),
    "Telemetry and interference": ("scrape_interval", "interference_threshold", "quiet_host"),
    "Security of attached agents": ("agent_token_file", "tls_ca", "tls_cert", "tls_key"),
    "Results": ("out", "store", "resume"),
}


class UnplacedOption(TypeError):
    """A command's option is in no panel, or a panel names an option the command lacks."""


def in_panels(panels: Mapping[str, Sequence[str]]) -> Callable[[Command], Command]:
    """Decorates a Typer command: every option in `panels`' sections of --help. Each
    option's ParameterInfo is copied before its panel is set (the Annotated aliases other
    commands share keep theirs)."""

    def place(command: Command) -> Command:
        hints = typing.get_type_hints(command, include_extras=True)
        options = {name for name, hint in hints.items() if _info(hint) is not None}
        where = {name: panel for panel, names in panels.items() for name in names}
        if set(where) != options:
            unplaced, unknown = sorted(options - set(where)), sorted(set(where) - options)
            raise UnplacedOption(
                f"{command.__name__}: options in no panel {unplaced}, panels' unknown {unknown}"
            )
        for name, panel in where.items():
            base, *extras = typing.get_args(hints[name])
            placed = [copy.copy(x) if isinstance(x, ParameterInfo) else x for x in extras]
            for extra in placed:
                if isinstance(extra, ParameterInfo):
                    extra.rich_help_panel = panel
            command.__annotations__[name] = Annotated[(base, *placed)]
        # Typer shows panels in the order of their first option: the signature's order is
        # the panels', so --help reads as `panels` does (calls pass options by name).
        order = list(where)
        signature = inspect.signature(command)
        ranked = sorted(
            signature.parameters.values(),
            key=lambda p: order.index(p.name) if p.name in where else -1,
        )
        setattr(command, "__signature__", signature.replace(parameters=ranked))  # noqa: B010
        return command

    return place


def _info(hint: Any) -> ParameterInfo | None:
    """The Typer option or argument an Annotated hint carries, if any."""
    found = [x for x in typing.get_args(hint)[1:] if isinstance(x, ParameterInfo)]
    return found[0] if found else None
