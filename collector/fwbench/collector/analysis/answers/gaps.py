"""Where a decided gap lives, said on its answer's line. In a run measured with `--profile`,
each decided comparison names the class of operations that holds most of its gap, as
`collector explain` splits it (analysis/attribution.py): "most of the gap in matmul: 4.0 of
5.5 ms (73%)"; or why the gap is not attributed (a side without a profile, the profiler's
own time able to move too much of it, too little of a step classed). A run without profiles
says nothing more, at no cost."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from fwbench.collector.analysis.comparison import Comparison
from fwbench.collector.analysis.contenders import RunData

GapNamer = Callable[[Comparison], str]
MOST = 0.5  # a share of the gap above it is "most of the gap"; below, "the largest part"


def gap_namer(run: RunData | None, comparisons: Sequence[Comparison]) -> GapNamer:
    """The phrase for each of `comparisons` (after with_decisions: the verdicts they answer
    with), "" for every comparison of a run that has no profile."""
    if run is None or "profile_classes" not in run.results:
        return lambda _: ""
    if not run.results["profile_classes"].notna().any():
        return lambda _: ""
    from fwbench.collector.analysis.attribution import attribute
    from fwbench.collector.analysis.contenders import contenders

    found = {_key(a.comparison): a for a in attribute(run, comparisons, contenders(run))}

    def phrase(comparison: Comparison) -> str:
        attribution = found.get(_key(comparison))
        if attribution is None or comparison.verdict not in ("faster", "slower"):
            return ""
        if not attribution.classes:
            return f"gap not attributed: {attribution.not_attributed}"
        top = attribution.classes[0]
        gap = abs(attribution.gap_seconds)
        scale, unit = (1e6, "µs") if gap < 1e-3 else (1e3, "ms") if gap < 1 else (1, "s")
        how = "most of the gap" if top.share_of_gap > MOST else "the largest part of the gap"
        where = {"outside": "outside operations", "unmapped": "in unmapped operations"}.get(
            top.op_class, f"in {top.op_class}"
        )
        return (
            f"{how} {where}: {abs(top.gap_seconds) * scale:.3g} of {gap * scale:.3g} {unit} "
            f"({top.share_of_gap:.0%}; collector explain)"
        )

    return phrase


def _key(comparison: Comparison) -> tuple[object, ...]:
    c = comparison
    return (c.agent, c.mode, c.baseline, c.baseline_mode, c.key)
