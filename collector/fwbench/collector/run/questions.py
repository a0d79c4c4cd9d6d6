"""The comparisons `collector run --until-decided` asks (run/decide.py measures them) and the
record of what it decided, for run.json and the printed summary."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from fwbench.collector.stats.sequential import METHOD
from fwbench.collector.stats.significance import UNDECIDED
from fwbench.collector.store.cell_key import CellKey


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
    arithmetic: str = ""  # the two sides ran different float32 arithmetic (agents/arithmetic.py)
    kernel: str = ""  # a decided one's sides' CPU in the kernel (agents/kernel_time.py)
    # Its sides' processes left out as interfered (run/interference.py), each measured again,
    # and the last one's reason.
    interfered: int = 0
    interference: str = ""
    # Its sides' processes it rests on whose interference could not be judged.
    interference_unknown: int = 0

    @property
    def open(self) -> bool:
        return self.verdict == UNDECIDED and not self.why


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
        return {
            **asdict(self.settings),
            "rounds": self.rounds,
            "seconds": round(self.seconds, 1),
            "round_seconds": [round(s, 1) for s in self.round_seconds],
            "stopped": self.stopped,
            "method": METHOD,
            "decisions": [
                {**_finite(_recorded(q)), "cell": q.key.label(), "key": list(q.key)}
                for q in self.questions
            ],
        }


def _recorded(question: Question) -> dict[str, Any]:
    return {k: v for k, v in asdict(question).items() if k != "twins"}


def _finite(record: dict[str, Any]) -> dict[str, Any]:
    """NaN (not looked at yet) as None: run.json stays standard JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in record.items()}
