"""A verdict of `--until-decided` as run.json keeps it: Decision (one comparison's) and
DecidedRun (the run's rounds and every decision). run/questions.py writes them through
record(); everything that reads a stored run (analysis/decisions.py, the answers, the glance,
the report, the end of `collector run`) reads them through from_record(), never by string
keys. Runs recorded before a field existed read its default."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any

from fwbench.collector.stats.sequential import MARGIN_GIVEN
from fwbench.collector.stats.significance import EQUIVALENT, FASTER, SLOWER, UNDECIDED
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.store.interference_columns import UNKNOWN, UNKNOWN_WHY


def finite(values: dict[str, Any]) -> dict[str, Any]:
    """NaN (not looked at yet) as None: run.json stays standard JSON."""
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in values.items()}


@dataclass(frozen=True)
class Decision:
    """`agent` (in `mode`, "" its default) against `against` in the cell `key`: the verdict
    of its last look, with that look's speedup and interval (None where it had none)."""

    key: tuple[Any, ...]  # CellKey's fields, as stored
    agent: str
    mode: str
    against: str
    against_mode: str
    verdict: str = UNDECIDED
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    level: float | None = None  # the interval's confidence level
    repetitions: int = 0  # processes a side at the last look
    looks: int = 0
    spent: float = 0.0  # the fraction of each error budget its looks spent
    spread: float | None = None  # SD of the log process medians, the larger side
    margin: float | None = None  # equivalence margin, fixed at its first look
    margin_from: str = ""
    why: str = ""  # why it ended undecided
    arithmetic: str = ""  # its sides ran different float32 arithmetic
    kernel: str = ""  # where a decided one's sides' CPU went
    interfered: int = 0  # its sides' processes left out as interfered, and the last reason
    interference: str = ""
    interference_unknown: int = 0  # processes it rests on whose interference was not judged

    @property
    def cell_key(self) -> CellKey:
        return CellKey(*self.key)

    @property
    def cell(self) -> str:
        return self.cell_key.label()

    @property
    def decided(self) -> bool:
        return self.verdict != UNDECIDED

    def record(self) -> dict[str, Any]:
        """For run.json: standard JSON (NaN as null), with the cell's label."""
        return {**finite(asdict(self)), "key": list(self.key), "cell": self.cell}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Decision:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in record.items() if k in known and v is not None}
        return cls(**{**values, "key": tuple(record["key"])})

    def oriented(self, inverted: bool) -> tuple[str, float | None, float | None, float | None]:
        """(verdict, speedup, low, high) as this decision says them, or the other way round
        (`inverted`: the against side's over this agent's)."""
        if not inverted:
            return self.verdict, self.speedup, self.ci_low, self.ci_high
        verdict = {FASTER: SLOWER, SLOWER: FASTER}.get(self.verdict, self.verdict)
        flip = [
            None if v is None or v <= 0 else 1 / v
            for v in (self.speedup, self.ci_high, self.ci_low)
        ]
        return verdict, flip[0], flip[1], flip[2]

    def reasons(self) -> list[str]:
        """What it says besides its verdict, each on its own: why it stayed undecided, the
        processes it rests on that were not judged for interference, where an undecided
        one's margin came from, a difference in arithmetic, where its CPU went."""
        source = self.margin_from or MARGIN_GIVEN
        if source == MARGIN_GIVEN or self.verdict in (FASTER, SLOWER):
            source = ""  # the caption's, or a difference (which does not depend on it)
        elif self.verdict != EQUIVALENT and self.margin is not None:
            source = f"margin ±{self.margin:.1%} {source}"  # an equivalence's verdict says it
        why = [part for part in self.why.split("; ") if part]
        if self.interference_unknown:
            why.append(
                f"{UNKNOWN} for {self.interference_unknown} of the processes it rests on: "
                f"{UNKNOWN_WHY}"
            )
        return [w for w in (*why, source, self.arithmetic, self.kernel) if w]


@dataclass(frozen=True)
class DecidedRun:
    """A run measured until decided: its settings, how its rounds went, every decision."""

    decisions: tuple[Decision, ...]
    baseline: str = ""
    floor: float = 0.0
    margin: float | None = None  # --margin; None: each decision's own
    budget_seconds: float = 0.0
    max_rounds: int = 0
    rounds: int = 0
    seconds: float = 0.0
    stopped: str = ""  # why measuring stopped
    method: str = ""
    round_seconds: tuple[float, ...] = ()

    def record(self) -> dict[str, Any]:
        return {
            **{f.name: getattr(self, f.name) for f in fields(self) if f.name != "decisions"},
            "seconds": round(self.seconds, 1),
            "round_seconds": [round(s, 1) for s in self.round_seconds],
            "decisions": [d.record() for d in self.decisions],
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> DecidedRun:
        known = {f.name for f in fields(cls)} - {"decisions", "round_seconds"}
        values = {k: v for k, v in record.items() if k in known}
        return cls(
            **values,
            decisions=tuple(Decision.from_record(d) for d in record["decisions"]),
            round_seconds=tuple(record.get("round_seconds") or ()),
        )

    def margin_of(self, decision: Decision) -> float | None:
        """Its equivalence margin as a verdict says it: its own (or --margin), at least the
        floor; None in a run that recorded neither."""
        margin = self.margin if decision.margin is None else decision.margin
        return None if margin is None else max(margin, self.floor)
