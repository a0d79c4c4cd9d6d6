"""Comparisons that settle questions, from the raw samples in the store.

- Against a baseline agent, within one run: every other agent's speedup in every workload
  cell, its interval, a test and a verdict (the rules are in significance.py). A/A pairs in
  the run (the same agent twice, agents/specs.py) measure the noise floor.
- Between two runs of the same agents (regression tracking): each agent's cell in run B
  against the same cell in run A, with `threshold` as the noise floor.

Who is compared with whom (cells, contenders) is contenders.py; the host's history that a
comparison of one process a side may lean on, history.py."""

from __future__ import annotations

import math

from fwbench.collector.agents.specs import aa_base
from fwbench.collector.analysis import hosts
from fwbench.collector.analysis.changes import run_changes
from fwbench.collector.analysis.comparison import (
    AA_FLOOR,
    FAILED_PROCESSES,
    HOST_HISTORY,
    INTERFERED,
    NEVER_CALLED,
    ONE_PROCESS,
    OTHER_SETTINGS,
    OUTPUTS_DIFFER,
    PROCESSES,
    Comparison,
    ComparisonSet,
    adjusted,
)
from fwbench.collector.analysis.contenders import (
    ComparisonError,
    Contender,
    RunData,
    contenders,
    differed_note,
    every_process_failed,
    failed_note,
    interfered_note,
    otherwise_note,
    unknown_note,
)
from fwbench.collector.analysis.efficiency import scaling_factor, world_shapes
from fwbench.collector.analysis.history import (
    HostHistory,
    comparison_margin,
    history_note,
    prior_of,
)
from fwbench.collector.analysis.noise import noise_measurements
from fwbench.collector.analysis.one_agent import NothingToCompare, only_agent
from fwbench.collector.stats.margins import EARLIER_RUNS
from fwbench.collector.stats.significance import (
    DEFAULT_NOISE_FLOOR,
    HISTORY,
    Prior,
    equivalence_p,
    estimate_speedup,
)
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.verdicts import arithmetic, kernel_time
from fwbench.collector.verdicts.families import FAMILY, family_baselines, left_out, result_triples


def _compare(
    base: Contender,
    other: Contender,
    baseline_label: str,
    floor: float,
    notes: list[str],
    margin: tuple[float, str],
    aa_floor: bool = False,
    prior: Prior | None = None,
    scaling: float | None = None,
) -> Comparison:
    """`aa_floor`: the floor comes from an A/A pair of the run (a measured prior); `prior`:
    the host's history of both sides, used where a side ran in one process; `scaling`: one
    agent's worlds of two shapes (efficiency.scaling_factor), whose speedup is then the
    efficiency: the contender's step times are divided by the factor."""
    groups = other.groups if scaling is None else tuple(g / scaling for g in other.groups)
    if scaling is not None:
        notes = [*notes, f"efficiency: items/s per replica over {base.agent}'s"]
    estimate = estimate_speedup(base.groups, groups, prior)
    if base.noisy or other.noisy:
        notes = [*notes, "noisy"]
    evidence = {PROCESSES: PROCESSES, HISTORY: HOST_HISTORY}.get(estimate.method, ONE_PROCESS)
    leaned = prior if evidence == HOST_HISTORY else None
    if leaned is not None:
        notes = [*notes, history_note(base.agent, other.agent, leaned)]
    if evidence == ONE_PROCESS and aa_floor:
        evidence = AA_FLOOR
    # Between two runs both sides are one agent: the earlier run's is named by its run.
    earlier = base.agent if base.agent != other.agent else f"run {baseline_label}'s {base.agent}"
    sides = ((other.agent, other), (earlier, base))
    left_out = [note for note in (interfered_note(name, side) for name, side in sides) if note]
    left_out += [note for note in (unknown_note(name, side) for name, side in sides) if note]
    notes = [*notes, *left_out]
    if not (base.clean and other.clean):
        evidence = INTERFERED
    for say, cannot in (
        (differed_note, OUTPUTS_DIFFER),
        (otherwise_note, OTHER_SETTINGS),
        (failed_note, FAILED_PROCESSES),
    ):
        said = [note for note in (say(name, side) for name, side in sides) if note]
        if said:  # failures outrank: the last one found says how to decide
            notes, evidence = [*notes, *said], cannot
    bound, never = 1 + max(margin[0], floor), evidence in NEVER_CALLED
    p_equivalent = math.nan if never else equivalence_p(base.groups, groups, bound, prior)
    return Comparison(
        key=other.key,
        agent=other.agent,
        mode=other.mode,
        baseline=baseline_label,
        baseline_mode=base.mode,
        n=other.n,
        baseline_n=base.n,
        median_seconds=other.median_seconds,
        baseline_median_seconds=base.median_seconds,
        speedup=estimate.speedup,
        ci_low=estimate.ci_low,
        ci_high=estimate.ci_high,
        p_value=estimate.p_value,
        p_adjusted=math.nan,
        noise_floor=floor,
        verdict="",
        notes=", ".join(notes),
        reasons=tuple(notes),
        method=estimate.method,
        margin=margin[0],
        margin_from=margin[1],
        evidence=evidence,
        repetitions=len(other.groups),
        baseline_repetitions=len(base.groups),
        p_equivalent=p_equivalent,
        prior_sd=math.hypot(*(side.sd for side in leaned)) if leaned else math.nan,
        scaling=math.nan if scaling is None else scaling,
    )


def compare_to_baseline(
    run: RunData,
    baseline: str,
    default_floor: float = DEFAULT_NOISE_FLOOR,
    margin: float | None = None,
    history: HostHistory | None = None,
    margins: HostHistory | None = None,
) -> ComparisonSet:
    """Every other agent against `baseline` in every cell both measured (a cell of one
    process a side leans on `history`, the host's, when it has both sides). Each equivalence
    margin is `margin` (--margin) when given, else from `margins`, the spreads measured on the
    host before the run (history.margin_histories), else DEFAULT_MARGIN. The noise floor of
    a cell is the largest of `default_floor` and the A/A differences measured in that cell
    (the run's largest A/A difference for a cell no A/A pair measured). An A/A instance of
    the baseline itself is judged against `default_floor` alone: its own difference is the
    thing being tested. Raises NothingToCompare for a run of one agent, one mode a cell."""
    cells = contenders(run)
    agents = list(dict.fromkeys(c.agent for c in cells))
    triples = result_triples(run.results) if baseline == FAMILY else []
    against = family_baselines(triples) if baseline == FAMILY else dict.fromkeys(agents, baseline)
    if baseline != FAMILY and baseline not in agents:
        raise ComparisonError(
            f"baseline {baseline!r} has no measured cells in run {run.run_id}; "
            f"agents with results: {', '.join(agents) or 'none'}"
        )
    if (alone := only_agent(run.results["agent"], ((c.mode, c.key) for c in cells))) is not None:
        raise NothingToCompare(run.run_id, alone)  # not the agent against itself
    noise = noise_measurements(cells)
    per_key: dict[CellKey, float] = {}
    for measurement in noise:
        per_key[measurement.key] = max(per_key.get(measurement.key, 0.0), measurement.difference)
    run_floor = max(per_key.values(), default=0.0)
    bases: dict[tuple[str, CellKey], Contender] = {}
    for cell in cells:  # first executed: the default mode comes first
        bases.setdefault((cell.agent, cell.key), cell)
    comparisons, settings = [], arithmetic.by_cell(run.results)
    skipped = every_process_failed(run, cells) + left_out(triples)
    kernel, shapes = kernel_time.by_cell(run.results), world_shapes(run.results)
    for cell in cells:
        base_agent = aa_base(cell.agent) if baseline == FAMILY else against.get(cell.agent)
        if baseline == FAMILY and base_agent == cell.agent:
            base_agent = against.get(cell.agent)  # not an A/A twin: its family's native
        if base_agent is None:
            continue  # a native agent, or one whose family has none in the run (left_out)
        base = bases.get((base_agent, cell.key))
        if cell is base:
            continue
        if base is None:
            skipped.append(f"{cell.agent} {cell.key.label()}: {base_agent} has no result")
            continue
        notes = [
            arithmetic.between(
                cell.agent, settings, cell.first_cell, base_agent, settings, base.first_cell
            ),
            kernel_time.between(cell.agent, kernel, cell.cells, base_agent, kernel, base.cells),
        ]
        floor = max(default_floor, per_key.get(cell.key, run_floor))
        aa_floor = bool(noise)
        if aa_base(cell.agent) == aa_base(base_agent) and cell.mode == base.mode:
            notes.insert(0, "A/A")
            floor, aa_floor = default_floor, False  # its own difference is being tested
        leaned = prior_of(history.spread(run, base), history.spread(run, cell)) if history else None
        notes = [n for n in notes if n]
        sides = (cell.agent, run, cell, margins), (base_agent, run, base, margins)
        within = comparison_margin(margin, *sides, EARLIER_RUNS)
        scaling = scaling_factor(shapes, base.first_cell, cell.first_cell)
        comparisons.append(
            _compare(base, cell, base_agent, floor, notes, within, aa_floor, leaned, scaling)
        )
    keys, order = list(dict.fromkeys(c.key for c in cells)), list(agents)
    comparisons.sort(key=lambda c: (keys.index(c.key), order.index(c.agent)))
    scaling = any(c.is_scaling for c in comparisons)
    worlds = " (worlds of other shapes: efficiency)" if scaling else ""
    return ComparisonSet(
        f"run {run.run_id}: speedup over "
        + ("each agent's family's native agent" if baseline == FAMILY else baseline)
        + worlds,
        adjusted(comparisons),
        noise,
        default_floor,
        skipped,
        margin=margin,
        per_row_baseline=baseline == FAMILY,
    )


def compare_runs(
    before: RunData,
    after: RunData,
    threshold: float,
    margin: float | None = None,
    histories: tuple[HostHistory, HostHistory] | None = None,
    margins: tuple[HostHistory, HostHistory] | None = None,
) -> ComparisonSet:
    """Each agent's cells in `after` against the same agent, mode and cell in `before`; a
    change is called only beyond `threshold` (the noise floor), equivalence within the larger
    of the threshold and the margin (`margin`, else from `margins`: each run's host's spreads
    measured before both runs, else DEFAULT_MARGIN); with one process a run, undecided unless
    `histories` (each run's host's) measured how much two processes differ."""
    cells = {run.run_id: contenders(run) for run in (before, after)}  # grouped once
    old = {(c.agent, c.mode, c.key): c for c in cells[before.run_id]}
    comparisons, skipped, basis = [], [], hosts.comparison_basis(before, after)
    was, now = arithmetic.by_cell(before.results), arithmetic.by_cell(after.results)
    kernel_was, kernel_now = (kernel_time.by_cell(run.results) for run in (before, after))
    now_run, was_run = f"run {after.run_id}", f"run {before.run_id}"
    for cell in cells[after.run_id]:
        base = old.pop((cell.agent, cell.mode, cell.key), None)
        if base is None:
            skipped.append(f"{cell.agent} {cell.key.label()}: not in run {before.run_id}")
            continue
        ran = (now_run, now, cell.first_cell, was_run, was)
        kernel = kernel_time.between(
            now_run, kernel_now, cell.cells, was_run, kernel_was, base.cells
        )
        notes = [n for n in [arithmetic.between(*ran, base.first_cell), kernel] if n]
        if basis == hosts.PEAK_FRACTION:  # other hosts: each against its own ceiling
            scaled, note = hosts.to_peak_fraction(before, base, after, cell)
            (notes if scaled else skipped).append(note)
            if scaled is None:
                continue
            cell = scaled
        leaned = None
        if histories:
            leaned = prior_of(histories[0].spread(before, base), histories[1].spread(after, cell))
        earlier, later = margins or (None, None)
        sides = (
            (f"{now_run}'s {cell.agent}", after, cell, later),
            (f"{was_run}'s {base.agent}", before, base, earlier),
        )
        within = comparison_margin(margin, *sides, f"the runs before {was_run}")
        comparisons.append(
            _compare(base, cell, before.run_id, threshold, notes, within, prior=leaned)
        )
    skipped += [f"{agent} {key.label()}: not in run {after.run_id}" for agent, _, key in old]
    for run in (before, after):
        skipped += [
            f"run {run.run_id}: {said}" for said in every_process_failed(run, cells[run.run_id])
        ]
    on = "" if basis == hosts.SECONDS else ", other hosts: compared as fractions of each one's peak"
    return ComparisonSet(
        f"run {after.run_id} against run {before.run_id} (speedup above 1: {after.run_id} "
        f"is faster{on})",
        *(adjusted(comparisons), [], threshold, skipped, "--threshold", margin),
        basis=basis,
        run_hosts=[hosts.host_of(before), hosts.host_of(after)],
        changes=run_changes(before, after),
    )
