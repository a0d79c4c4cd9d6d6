"""`collector explain`: where each decided gap of a profiled run lives, over the common classes
of operations (analysis/attribution.py, docs/profiling.md)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from fwbench.collector.cli.analysis import baseline_comparisons
from fwbench.collector.cli.common import StorePath, console, fail, fail_with, reads_store

if TYPE_CHECKING:
    from fwbench.collector.analysis.attribution import Attribution


@reads_store
def explain(
    run_id: Annotated[str, typer.Argument(help="A run measured with --profile: its ID or folder.")],
    baseline: Annotated[str, typer.Option(help="Agent the others are compared with.")],
    agents: Annotated[
        str, typer.Option(help="Comma-separated agents to explain (default: every other one).")
    ] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
    store: StorePath = None,
) -> None:
    """Where each decided gap against the baseline lives: the difference of the timed medians
    split over the common classes of operations by each side's profile, with its coverage
    and the largest operations; a comparison not decided is never attributed."""
    from fwbench.collector.analysis.answers import with_decisions
    from fwbench.collector.analysis.attribution import attribute
    from fwbench.collector.analysis.contenders import ComparisonError, contenders, load_run
    from fwbench.collector.analysis.decisions import stored_decisions
    from fwbench.collector.run.plan import split_list
    from fwbench.collector.store import ResultStore, default_store_path

    db = ResultStore(store or default_store_path(), create=False)
    try:
        run = load_run(db, run_id)
        result = baseline_comparisons(db, run, baseline)  # what `compare` says of the run
    except ComparisonError as error:
        fail_with(error)
    result = with_decisions(result, stored_decisions(run.metadata))
    wanted = split_list(agents)
    unknown = sorted(set(wanted) - {c.agent for c in result.comparisons})
    if unknown:
        fail(f"no comparison of {', '.join(unknown)} against {baseline} in run {run.run_id}")
    chosen = [c for c in result.comparisons if not wanted or c.agent in wanted]
    found = attribute(run, chosen, contenders(run))
    if as_json:
        print(json.dumps([_record(a) for a in found], indent=1))
        return
    for attribution in found:
        _show(attribution)


def _title(attribution: Attribution) -> str:
    c = attribution.comparison
    ratio = f"{c.speedup:.3g}x [{c.ci_low:.3g}, {c.ci_high:.3g}]"
    agent, against = c.agent, c.baseline
    if agent == against:  # an agent's modes against each other
        agent, against = f"{agent} ({c.mode})", f"{against} ({c.baseline_mode})"
    return f"{c.key.label()}: {agent} against {against}: {c.verdict}, {ratio}"


def _show(attribution: Attribution) -> None:
    from rich.table import Table

    from fwbench.collector.run.progress import seconds_text

    c = attribution.comparison
    if attribution.not_attributed:
        console.print(f"{_title(attribution)}: not attributed: {attribution.not_attributed}")
        return
    gap = attribution.gap_seconds
    console.print(f"{_title(attribution)}; the gap {seconds_text(abs(gap))}", highlight=False)
    table = Table()
    for header in ("class", c.baseline, c.agent, "gap", "share of gap"):
        table.add_column(header, justify="left" if header == "class" else "right")
    for part in attribution.classes:
        table.add_row(
            part.op_class,
            seconds_text(part.baseline_seconds),
            seconds_text(part.agent_seconds),
            ("+" if part.gap_seconds >= 0 else "-") + seconds_text(abs(part.gap_seconds)),
            f"{part.share_of_gap:.0%}",
        )
    console.print(table)
    sides = (c.baseline, c.agent)
    covered = ", ".join(
        f"{name} {x:.0%}" for name, x in zip(sides, attribution.coverage, strict=True)
    )
    stretched = " and ".join(f"{x:.2f}x" for x in attribution.effect)
    console.print(f"  classed: {covered} of the profiled steps", highlight=False)
    console.print(
        f"  profiled steps took {stretched} the timed medians: the profiler's own time could "
        f"move at most {attribution.distortion:.0%} of the gap between classes",
        highlight=False,
    )
    for name, top in ((c.baseline, attribution.top[0]), (c.agent, attribution.top[1])):
        largest = ", ".join(f"{op[0]} ({op[1] or 'unmapped'}) {seconds_text(op[2])}" for op in top)
        console.print(
            f"  {name}'s largest operations, per profiled step: {largest}", highlight=False
        )


def _record(attribution: Attribution) -> dict[str, Any]:
    c = attribution.comparison
    return {
        "cell": c.key.label(),
        "agent": c.agent,
        "baseline": c.baseline,
        "verdict": c.verdict,
        "speedup": c.speedup,
        "gap_seconds": attribution.gap_seconds,
        "not_attributed": attribution.not_attributed,
        "coverage": [x if x == x else None for x in attribution.coverage],  # NaN: none
        "effect": [x if x == x else None for x in attribution.effect],
        "profilers": list(attribution.profilers),
        "distortion": attribution.distortion
        if attribution.distortion == attribution.distortion
        else None,
        "classes": [
            {
                "class": part.op_class,
                "baseline_seconds": part.baseline_seconds,
                "agent_seconds": part.agent_seconds,
                "gap_seconds": part.gap_seconds,
                "share_of_gap": part.share_of_gap,
            }
            for part in attribution.classes
        ],
        "top_operations": {c.baseline: attribution.top[0], c.agent: attribution.top[1]},
    }
