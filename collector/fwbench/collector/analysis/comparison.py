"""What a comparison is: one contender against its baseline in one cell (Comparison), and the
set shown together (ComparisonSet), with the names of what accounted for process-to-process
variation. compare.py makes them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from fwbench.collector.analysis import hosts
from fwbench.collector.analysis.contenders import KEY_COLUMNS, CellKey
from fwbench.collector.analysis.noise import NoiseMeasurement
from fwbench.collector.stats.failures import FAILED_NOTE, OTHERWISE_NOTE
from fwbench.collector.stats.significance import DEFAULT_MARGIN, HISTORY

# What accounts for process-to-process variation in a comparison (significance.py).
PROCESSES, AA_FLOOR, ONE_PROCESS = "processes", "A/A floor", "one process"
HOST_HISTORY = HISTORY  # a prior from the host's earlier runs (history.py)
ONE_PROCESS_NOTE = "one process a side, no A/A pair and no history of both on this host: how "
ONE_PROCESS_NOTE += "much processes differ is unknown; --repeat 3 (or more) decides"
# A side had processes that failed in the cell: the ones that finished cannot stand for them (a
# process that ran out of time or memory is the slow or the big one), so nothing is called.
FAILED_PROCESSES = "failed processes"  # stats/failures.py
OTHER_SETTINGS = "other settings than asked"  # stats/failures.py
# Evidence on which nothing can be called (not counted in Holm's family), with what an
# undecided comparison of it says would decide it.
NEVER_CALLED = {
    ONE_PROCESS: ONE_PROCESS_NOTE,
    FAILED_PROCESSES: FAILED_NOTE,
    OTHER_SETTINGS: OTHERWISE_NOTE,
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
    # What accounts for process-to-process variation: PROCESSES, AA_FLOOR or ONE_PROCESS
    # (nothing does: the verdict is undecided); FAILED_PROCESSES: a side had failed processes
    # in the cell, OTHER_SETTINGS: a side's processes ran otherwise than asked (undecided
    # whatever the others measured).
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

    def key_dict(self) -> dict[str, Any]:
        return dict(zip(KEY_COLUMNS, self.key, strict=True))


@dataclass(frozen=True)
class ComparisonSet:
    title: str
    comparisons: list[Comparison]
    noise: list[NoiseMeasurement]
    default_floor: float
    skipped: list[str]  # contenders that had nothing to be compared with
    floor_source: str = "default"  # where default_floor came from, for the reader
    margin: float = DEFAULT_MARGIN
    basis: str = hosts.SECONDS  # what two runs' speedups are of: seconds, or peak fractions
    run_hosts: list[dict[str, Any]] = field(default_factory=list)  # two runs: hosts.host_of
    changes: list[str] = field(default_factory=list)  # two runs: changes.run_changes

    @property
    def measured_floor(self) -> float | None:
        """The largest A/A difference in the run, None without A/A pairs."""
        return max((m.difference for m in self.noise), default=None)
