"""The comparisons `collector run --until-decided` asks (run/decide.py measures them) and the
record of what it decided, for run.json and the printed summary."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from fwbench.collector.stats.sequential import METHOD
from fwbench.collector.stats.significance import UNDECIDED
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.verdicts.record import DecidedRun, Decision, finite


@dataclass
class Question:
    """One comparison: `agent` (in `mode`) against agent `against` (in its first mode) in
    `key`: the baseline, or for an A/A twin its own agent."""

    key: CellKey
    agent: str
    mode: str
    against: str
    against_mode: str
    verdict: str = UNDECIDED
    speedup: float = float("nan")
    ci_low: float = float("nan")
    ci_high: float = float("nan")
    level: float = float("nan")  # the interval's confidence level
    repetitions: int = 0
    looks: int = 0
    spent: float = 0.0  # the fraction of each error budget its looks spent (sequential.py)
    spread: float = float("nan")  # SD of the log process medians, the larger side (Look)
    # equivalence margin, fixed at its first look (stats/margins.py)
    margin: float = float("nan")
    margin_from: str = ""  # where the margin came from
    why: str = ""  # why it ended undecided, or "" while open
    # Whether both sides are instances of one agent (an A/A pair, or its two modes): their
    # margin comes from the agent's own spread once (stats/margins.py). Not recorded.
    twins: bool = False
    arithmetic: str = ""  # the two sides ran different float32 arithmetic (verdicts/arithmetic.py)
    kernel: str = ""  # a decided one's sides' CPU in the kernel (verdicts/kernel_time.py)
    # Its sides' processes left out as interfered (run/interference.py), each measured again,
    # and the last one's reason.
    interfered: int = 0
    interference: str = ""
    # Its sides' processes it rests on whose interference could not be judged.
    interference_unknown: int = 0

    @property
    def open(self) -> bool:
        return self.verdict == UNDECIDED and not self.why

    def decision(self) -> Decision:
        """What it decided, as run.json keeps it (NaN, not looked at yet, as None)."""
        values = finite({k: v for k, v in asdict(self).items() if k != "twins"})
        return Decision(**{**values, "key": tuple(self.key)})


@dataclass(frozen=True)
class DecideSettings:
    baseline: str
    floor: float
    margin: float | None  # --margin; None: each comparison's from this host's history
    budget_seconds: float
    max_rounds: int


@dataclass
class Decisions:
    """What the procedure did, for run.json and the printed summary."""

    settings: DecideSettings
    questions: list[Question]
    rounds: int = 0
    seconds: float = 0.0
    stopped: str = ""  # why measuring stopped
    round_seconds: list[float] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        """For run.json, through the record type every reader uses (verdicts/record.py)."""
        return DecidedRun(
            **asdict(self.settings),
            rounds=self.rounds,
            seconds=self.seconds,
            stopped=self.stopped,
            method=METHOD,
            decisions=tuple(q.decision() for q in self.questions),
            round_seconds=tuple(self.round_seconds),
        ).record()
