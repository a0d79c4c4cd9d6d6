"""A run with nothing to compare: one agent, each cell in one mode. `collector compare RUN
--baseline AGENT` says so in one line (exit 2) instead of an empty table, the report says so
where its comparisons would be, and the end of `collector run` proposes what is useful (the
report, the results, a second agent) instead of comparing the agent with itself."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from fwbench.collector.analysis.contenders import ComparisonError
from fwbench.collector.store.cell_key import CellKey, clean
from fwbench.collector.verdicts.families import FAMILY, family_baselines, result_triples


class NothingToCompare(ComparisonError):
    """The run's one agent is all there is: no other agent, no other mode of it."""

    def __init__(self, run_id: str, agent: str) -> None:
        self.run_id, self.agent = run_id, agent
        super().__init__(
            f"nothing to compare against: {agent} is the only agent in run {run_id}; "
            f"`collector results {run_id}` shows its rows; {to_compare(agent)}"
        )


def to_compare(agent: str) -> str:
    """What measures a comparison with `agent`."""
    return f"to compare it, run it beside another agent: --agents {agent},OTHER (or --aa {agent})"


def only_agent(agents: Iterable[str], measured: Iterable[tuple[str, CellKey]]) -> str | None:
    """The run's one agent when nothing in it can be compared: `agents`, those its rows name
    (whatever their status: another agent's failures are said by a comparison), are one, and
    `measured`, its measured cells (mode, cell), have one mode each (an agent's other modes
    are compared with its first)."""
    named = set(agents)
    modes: dict[CellKey, set[str]] = {}
    for mode, key in measured:
        modes.setdefault(key, set()).add(mode)
    if len(named) != 1 or any(len(found) > 1 for found in modes.values()):
        return None
    return str(next(iter(named)))


def next_steps(results: pd.DataFrame, out_dir: Path | str, baseline: str | None) -> str:
    """The end of `collector run`'s "next:" line for its result rows: the report, and the
    comparison against `baseline` (--baseline, else the first agent) and the family view
    where some agent stands beside another framework; for a run with nothing to compare, the
    report and the results, and what would compare the agent."""
    ok = results[results["status"] == "ok"].to_dict("records")
    alone = only_agent(results["agent"], ((clean(r["mode"]) or "", CellKey.of_row(r)) for r in ok))
    if alone is not None:
        return (
            f"next: collector report {out_dir}  |  collector results {out_dir}  "
            f"(one agent: nothing to compare; {to_compare(alone)})"
        )
    baseline = baseline or str(results["agent"].iloc[0])  # as the rows name it
    # Agents that stand beside another framework (Keras on X, ONNX Runtime): their view too.
    families = baseline != FAMILY and any(family_baselines(result_triples(results)).values())
    return (
        f"next: collector report {out_dir}  |  collector compare {out_dir} --baseline {baseline}"
        + (f"  |  collector compare {out_dir} --baseline {FAMILY}" if families else "")
    )
