"""The equivalence margin of a comparison: `--margin` when given, else this host's noise for
that cell as its earlier runs measured it (docs/report.md, "The margin"). `--until-decided`
(run/decide.py) and `compare` (analysis/compare.py) both take it from here.

Equivalence says the two sides differ by less than a difference that matters. Without
`--margin`, the difference that matters is taken to be the one a user would see anyway on
this host by running one process of each side once more: the SD of the difference of two
single processes' log medians, sqrt(sd_a^2 + sd_b^2), each sd being the spread between that
agent's processes in that cell that this host's earlier runs measured (analysis/history.py:
the same agent, mode, cell, launcher, CPU, framework version and environment switches, pooled
over 2 or more runs). An A/A pair's processes 5.5% apart give a margin of about 8%. It is at
least DEFAULT_MARGIN (5%) and at most MAX_HISTORY_MARGIN (10%): a host noisier than that
leaves the comparison undecided rather than "equivalent" within a margin too wide to mean
anything. Where the host has no such history (a new host, a new agent or cell), the margin is
DEFAULT_MARGIN.

Only runs that started before the data being judged count, so the margin is fixed before any
of it: the two one-sided tests keep their error rates against it (a margin chosen from the
data's own spread would widen with it, and a noisier run would get an easier "equivalent")."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from fwbench.collector.stats.sequential import MARGIN_GIVEN, MAX_HISTORY_MARGIN
from fwbench.collector.stats.significance import DEFAULT_MARGIN, ProcessSpread

# A result row -> the spread of its agent, mode and cell on this host before the run being
# judged (analysis/history.py's earlier_history(...).of_row), None where not measured.
SpreadOf = Callable[[Mapping[str, Any]], ProcessSpread | None]
EARLIER_RUNS = "this host's earlier runs"
NO_HISTORY_MARGIN = "by default: no host history was read (--no-host-history)"


def margin_for(
    given: float | None,
    agent: str,
    first: ProcessSpread | None,
    against: str,
    second: ProcessSpread | None,
    twins: bool = False,
    earlier: str = EARLIER_RUNS,
) -> tuple[float, str]:
    """(margin, where it came from: "by default: ...", "from this host's earlier runs: ..."
    or "--margin") for a comparison of `agent` (its earlier spread `first`) against `against`
    (`second`): `given` (--margin) when not None. `twins`: the two are one agent (an A/A pair,
    or one agent in two runs), whose spread is said once; `earlier`: what measured the
    spreads, as the text names it."""
    if given is not None:
        return given, MARGIN_GIVEN
    if first is None or second is None:
        missing = " and ".join(n for n, s in ((agent, first), (against, second)) if s is None)
        return DEFAULT_MARGIN, (
            f"by default: {earlier} did not measure how far apart {missing}'s "
            "processes lie in this cell"
        )
    apart = math.expm1(math.hypot(first.sd, second.sd))
    margin = min(max(apart, DEFAULT_MARGIN), MAX_HISTORY_MARGIN)
    bounded = (
        f", at least {DEFAULT_MARGIN:.0%}"
        if apart < DEFAULT_MARGIN
        else f", at most {MAX_HISTORY_MARGIN:.0%}"
        if apart > MAX_HISTORY_MARGIN
        else ""
    )
    sides = (
        f"{agent}'s processes {first.sd:.1%} apart over {first.runs} runs, {first.processes} "
        "processes"
        if twins
        else f"{agent} {first.sd:.1%} over {first.runs} runs, {first.processes} processes; "
        f"{against} {second.sd:.1%} over {second.runs}, {second.processes}"
    )
    return margin, (
        f"from {earlier}: one process of each side lies "
        f"{apart:.1%} from the other (SD{bounded}; {sides})"
    )
