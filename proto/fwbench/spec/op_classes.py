"""The common classes of operations, and each framework's operation names mapped onto them
(op_classes.toml; protocol 1.10's OperationTime.op_class): what lets two frameworks' profiles
of the same cell be compared in the same terms (docs/profiling.md).

Agents classify what their profiler saw with `classify` before they send it; the collector
checks every class it receives is one of CLASSES (or "" for a name the mapping lacks, which it
lists as unmapped) and adds OUTSIDE, the step's time outside any operation."""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Mapping
from importlib import resources

_FILE = "op_classes.toml"
OUTSIDE = "outside"  # the step's wall time less its operations' self times (the collector's)
UNMAPPED = ""  # OperationTime.op_class of a name no expression matches
MAX_PROFILE_STEPS = 1000  # RunRequest.profile.steps: 0 (no profile) to this (agent.proto)
TRACE_FORMATS = ("chrome-trace", "xplane")  # ProfileResult.trace_format


@functools.cache
def _table() -> dict[str, object]:
    return tomllib.loads(resources.files("fwbench.spec").joinpath(_FILE).read_text("utf-8"))


@functools.cache
def classes() -> Mapping[str, str]:
    """Every class with what it holds, in the file's order."""
    found: dict[str, str] = dict(_table()["classes"])  # type: ignore[call-overload]
    return found


def frameworks() -> tuple[str, ...]:
    """The frameworks whose names the file maps."""
    return tuple(_table()["frameworks"])  # type: ignore[arg-type]


@functools.cache
def _rules(framework: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    table: Mapping[str, list[str]] = _table()["frameworks"].get(framework, {})  # type: ignore[attr-defined]
    known = classes()
    rules = []
    for name, expressions in table.items():
        if name not in known:
            raise ValueError(f"{_FILE}: [frameworks.{framework}] names unknown class {name!r}")
        rules += [(name, re.compile(expression)) for expression in expressions]
    return tuple(rules)


@functools.lru_cache(maxsize=4096)
def classify(framework: str, name: str) -> str:
    """The class of operation `name` as `framework`'s profiler names it; UNMAPPED when the
    file has no expression for it (or nothing for the framework)."""
    for op_class, expression in _rules(framework):
        if expression.fullmatch(name):
            return op_class
    return UNMAPPED
