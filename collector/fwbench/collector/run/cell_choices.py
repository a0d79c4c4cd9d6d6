"""Which modes and strategies a cell runs in, and why an agent cannot run one (plan.py)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from fwbench.agent.v1 import agent_pb2
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

MAX_REASON = 300


def cell_modes(
    support: agent_pb2.WorkloadSupport | None, workload: str, modes: tuple[str, ...]
) -> list[tuple[str, str]]:
    """(mode, unsupported reason) pairs; "" is the agent's default mode. Of explicitly named
    modes, an agent runs those it offers (so `--modes compile,xla,jit` gives each framework its
    compiled mode); one that offers none of them gets a single unsupported cell."""
    offered = list(support.modes) if support else []
    if modes == ("default",) or not offered:
        return [("", "")]
    if modes == ("all",):
        return [(mode, "") for mode in offered]
    chosen = [mode for mode in modes if mode in offered]
    if chosen:
        return [(mode, "") for mode in chosen]
    reason = f"agent offers none of the modes {', '.join(modes)} for {workload}"
    return [(modes[0], f"{reason} (it offers {', '.join(offered)})")]


def unsupported(
    support: agent_pb2.WorkloadSupport | None,
    workload: str,
    phase: str,
    dtype: str,
    reasons: Mapping[str, str] | None = None,
) -> str:
    """Why the agent cannot run the cell ("" when it can), with the agent's own reason when its
    Describe gives one (unsupported_reasons: "WORKLOAD", "WORKLOAD/PHASE" or "*/PHASE")."""
    reasons = reasons or {}
    if support is None:
        return _because(f"agent does not implement {workload}", reasons.get(workload))
    if PHASE_VALUES[phase] not in support.phases:
        why = reasons.get(f"{workload}/{phase}") or reasons.get(f"*/{phase}")
        return _because(f"agent does not support phase {phase} for {workload}", why)
    if DTYPE_VALUES[dtype] not in support.dtypes:
        return f"agent does not support dtype {dtype} for {workload}"
    return ""


def _because(what: str, why: str | None) -> str:
    """`what`, and the agent's reason after it: one line, at most MAX_REASON characters (an
    agent's text goes into the row as it is only after it is made one bounded line)."""
    line = " ".join((why or "").split())
    if len(line) > MAX_REASON:
        line = line[: MAX_REASON - 1] + "…"
    return f"{what}: {line}" if line else what


def cell_strategies(
    support: agent_pb2.WorkloadSupport | None,
    workload: str,
    strategies: tuple[str, ...],
    in_world: bool,
    known: Collection[str] = (),
) -> list[tuple[str, str]]:
    """(strategy, unsupported reason) pairs, as cell_modes does for modes: "" is the agent's
    default; an agent alone runs every cell with none. `known`: the strategies the agent
    offers for any workload. A named strategy it offers elsewhere but not for this workload
    is an unsupported cell with the reason, never dropped (torch's pipeline for lenet); one it
    never offers is another framework's name (tf's mirrored for torch) and is left out."""
    offered = list(support.strategies) if support else []
    if not in_world or strategies == ("default",) or not offered:
        return [("", "")]
    if strategies == ("all",):
        return [(strategy, "") for strategy in offered]
    chosen = [(strategy, "") for strategy in strategies if strategy in offered]
    because = f"(it offers {', '.join(offered)})"
    chosen += [
        (strategy, f"agent offers {strategy} for other workloads, not for {workload} {because}")
        for strategy in strategies
        if strategy not in offered and strategy in known
    ]
    if chosen:
        return chosen
    reason = f"agent offers none of the strategies {', '.join(strategies)} for {workload}"
    return [(strategies[0], f"{reason} {because}")]
