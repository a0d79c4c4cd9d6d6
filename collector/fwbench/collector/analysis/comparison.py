"""What a comparison is: one contender against its baseline in one cell (Comparison), and the
set shown together (ComparisonSet), with the names of what accounted for process-to-process
variation and what would decide an undecided one. compare.py makes them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from fwbench.collector.analysis import hosts
from fwbench.collector.analysis.efficiency import SCALING_VERDICTS
from fwbench.collector.analysis.noise import NoiseMeasurement
from fwbench.collector.stats.classical import t_ppf
from fwbench.collector.stats.failures import (
    DIFFERED_NOTE,
    FAILED_NOTE,
    INTERFERED_NOTE,
    OTHERWISE_NOTE,
)
from fwbench.collector.stats.needed import repetitions_needed, would_decide
from fwbench.collector.stats.significance import (
    ALPHA,
    DEFAULT_MARGIN,
    FASTER,
    HISTORY,
    SLOWER,
    UNDECIDED,
    RatioEstimate,
    holm,
    verdict,
)
from fwbench.collector.store.cell_key import KEY_COLUMNS, CellKey

SELF_DIFFERS = "A/A: the same agent differs from itself"
# What accounts for process-to-process variation in a comparison (significance.py).
PROCESSES, AA_FLOOR, ONE_PROCESS = "processes", "A/A floor", "one process"
HOST_HISTORY = HISTORY  # a prior from the host's earlier runs (history.py)
ONE_PROCESS_NOTE = "one process a side, no A/A pair and no history of both on this host: how "
ONE_PROCESS_NOTE += "much processes differ is unknown; --until-decided (or --repeat 3 and more) "
ONE_PROCESS_NOTE += "decides"
# A side had processes that failed in the cell: the ones that finished cannot stand for them (a
# process that ran out of time or memory is the slow or the big one), so nothing is called.
FAILED_PROCESSES = "failed processes"  # stats/failures.py
OTHER_SETTINGS = "other settings than asked"  # stats/failures.py
OUTPUTS_DIFFER = "outputs differ"  # a model file's outputs, not the reference's
# Every process of a side was interfered (run/interference.py): nothing clean to call from.
INTERFERED = "interfered processes"
# Evidence on which nothing can be called (not counted in Holm's family), with what an
# undecided comparison of it says would decide it.
NEVER_CALLED = {
    ONE_PROCESS: ONE_PROCESS_NOTE,
    FAILED_PROCESSES: FAILED_NOTE,
    OTHER_SETTINGS: OTHERWISE_NOTE,
    OUTPUTS_DIFFER: DIFFERED_NOTE,
    INTERFERED: INTERFERED_NOTE,
}


@dataclass(frozen=True)
class Comparison:
    key: CellKey
    agent: str
    mode: str
    baseline: str  # agent (within a run) or run id (between runs)
    baseline_mode: str
    n: int
    baseline_n: int
    median_seconds: float
    baseline_median_seconds: float
    speedup: float  # baseline median / contender median: above 1 is faster
    ci_low: float
    ci_high: float
    p_value: float
    p_adjusted: float
    noise_floor: float
    verdict: str
    notes: str
    # How the interval and p came about: "processes" (Welch's t over the repetitions) or
    # "bootstrap" (samples of one process on at least one side); significance.py.
    method: str = ""
    margin: float = DEFAULT_MARGIN  # equivalence margin asked for (max'ed with the floor)
    margin_from: str = ""  # where the margin came from (stats/margins.py)
    # What accounts for process-to-process variation: PROCESSES, AA_FLOOR or ONE_PROCESS
    # (nothing does: the verdict is undecided); FAILED_PROCESSES: a side had failed processes
    # in the cell, OTHER_SETTINGS: a side's processes ran otherwise than asked, INTERFERED:
    # every process of a side was interfered (undecided whatever the others measured).
    evidence: str = ""
    repetitions: int = 1
    baseline_repetitions: int = 1
    # TOST p-value against the equivalence margin, and Holm-adjusted over the set (NaN where
    # nothing accounts for process variation: never called equivalent, so not counted).
    p_equivalent: float = math.nan
    p_equivalent_adjusted: float = math.nan
    # Evidence HOST_HISTORY: the SD of the log speedup of one process a side by the priors,
    # sqrt(sd_base^2 + sd_other^2); NaN otherwise.
    prior_sd: float = math.nan
    # Where the verdict came from in a run measured until decided (analysis/answers.py): its
    # sequential decision, or (a comparison it did not ask) this fixed-level test; "" else.
    verdict_from: str = ""
    # One agent's world against its world of another shape (analysis/efficiency.py): the
    # factor c of efficiency = c x t_baseline / t, and `speedup` with its interval is then
    # the efficiency (per replica, against the baseline's); NaN for any other comparison.
    scaling: float = math.nan
    # Each of `notes`' reasons on its own (notes joins them): tables footnote them (glance.py).
    reasons: tuple[str, ...] = ()

    @property
    def is_scaling(self) -> bool:
        return not math.isnan(self.scaling)

    @property
    def shown_verdict(self) -> str:
        """The verdict in the words of its measure: a scaling's is linear, sub-linear, ..."""
        return SCALING_VERDICTS.get(self.verdict, self.verdict) if self.is_scaling else self.verdict

    def key_dict(self) -> dict[str, Any]:
        return dict(zip(KEY_COLUMNS, self.key, strict=True))

    def estimate(self) -> RatioEstimate:
        return RatioEstimate(self.speedup, self.ci_low, self.ci_high, self.p_value, self.method)


def how_to_decide(comparison: Comparison) -> str:
    """What an undecided comparison would need: what could decide it where nothing can be called
    from its evidence, else about how many repetitions a side."""
    if comparison.evidence in NEVER_CALLED:
        return NEVER_CALLED[comparison.evidence]
    estimate = comparison.estimate()
    repetitions = min(comparison.repetitions, comparison.baseline_repetitions)
    level = 1 - ALPHA if comparison.evidence == PROCESSES else None  # Welch's, else bootstrap
    if comparison.evidence == HOST_HISTORY:
        # With --repeat the processes are the evidence: Welch's interval at 2 a side if they
        # differ as the priors say, not the prior's heavy-tailed one (its few degrees of
        # freedom say how much days differ, not how much processes of one run will).
        half = t_ppf(1 - ALPHA / 2, 2) * comparison.prior_sd / math.sqrt(2)
        centre = math.log(estimate.speedup)
        low, high = math.exp(centre - half), math.exp(centre + half)
        estimate = replace(estimate, ci_low=low, ci_high=high)
        repetitions, level = 2, 1 - ALPHA
    needed = repetitions_needed(
        estimate, repetitions, comparison.noise_floor, comparison.margin, level
    )
    return would_decide(needed, "repetitions")


@dataclass(frozen=True)
class ComparisonSet:
    title: str
    comparisons: list[Comparison]
    noise: list[NoiseMeasurement]
    default_floor: float
    skipped: list[str]  # contenders that had nothing to be compared with
    floor_source: str = "default"  # where default_floor came from, for the reader
    margin: float | None = None  # --margin; None: each comparison's own (margin_from)
    basis: str = hosts.SECONDS  # what two runs' speedups are of: seconds, or peak fractions
    run_hosts: list[dict[str, Any]] = field(default_factory=list)  # two runs: hosts.host_of
    changes: list[str] = field(default_factory=list)  # two runs: changes.run_changes
    # Each row against its own baseline (--baseline family): tables name it in the row.
    per_row_baseline: bool = False

    @property
    def measured_floor(self) -> float | None:
        """The largest A/A difference in the run, None without A/A pairs."""
        return max((m.difference for m in self.noise), default=None)


def adjusted(comparisons: list[Comparison]) -> list[Comparison]:
    """Holm over every comparison shown together that can be called, for differences and for
    equivalences (each family held at its level), then the verdicts. A comparison of one
    process a side with nothing to account for process variation is never called, so it is
    not counted (its p_adjusted is NaN)."""
    adjusted = holm([math.nan if c.evidence in NEVER_CALLED else c.p_value for c in comparisons])
    equivalences = holm([c.p_equivalent for c in comparisons])
    done = []
    for comparison, p, p_same in zip(comparisons, adjusted, equivalences, strict=True):
        estimate = comparison.estimate()
        accounted = comparison.evidence not in NEVER_CALLED
        floor, margin = comparison.noise_floor, comparison.margin
        called = verdict(
            estimate, p, floor, margin, accounted, 1.0 if math.isnan(p_same) else p_same
        )
        notes = [comparison.notes] if comparison.notes else []
        reasons = list(comparison.reasons)
        if notes and notes[0].startswith("A/A") and called in (FASTER, SLOWER):
            notes[0] = notes[0].replace("A/A", SELF_DIFFERS, 1)
            reasons[:1] = [SELF_DIFFERS] if reasons[:1] == ["A/A"] else reasons[:1]
        if called == UNDECIDED:
            notes.append(how_to_decide(comparison))
            reasons.append(notes[-1])
        said = ", ".join(notes)
        done.append(
            replace(
                comparison,
                p_adjusted=p,
                p_equivalent_adjusted=p_same,
                verdict=called,
                notes=said,
                reasons=tuple(reasons),
            )
        )
    return done
