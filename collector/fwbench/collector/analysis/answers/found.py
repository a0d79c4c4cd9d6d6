"""What a run found, as data (Found, Undecided, Answers) and as it is shown: a terminal's
lines, Markdown's, and the numbered notes that say a repeated note once under a table."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from rich.text import Text

from fwbench.collector.analysis.comparison import NEVER_CALLED
from fwbench.collector.stats.significance import EQUIVALENT, FASTER, SLOWER, UNDECIDED
from fwbench.collector.store.interference_columns import UNKNOWN
from fwbench.collector.verdicts.families import FAMILY
from fwbench.collector.verdicts.record import DecidedRun

# Comparison.verdict_from in a run measured until decided.
SEQUENTIAL, FIXED_LEVEL = "sequential", "fixed-level"
STYLES = {FASTER: "green", SLOWER: "red", EQUIVALENT: "cyan", UNDECIDED: "yellow"}


@dataclass(frozen=True)
class Found:
    """A decided comparison: `text` is its one line."""

    verdict: str
    text: str
    agent: str
    against: str
    cell: str
    speedup: float | None
    ci_low: float | None
    ci_high: float | None
    verdict_from: str = ""  # SEQUENTIAL, FIXED_LEVEL, or "" (a run of fixed repetitions)
    gap: str = ""  # where the gap lives, in a profiled run (gaps.py); also the text's end


@dataclass(frozen=True)
class Undecided:
    """Comparisons left undecided for one reason, and what would likely decide them ("" where
    no command can: a failure to look into, settings to fix)."""

    count: int
    reason: str
    command: str = ""
    decides: int | None = None  # how many of them the command would likely decide (None: all)

    @property
    def text(self) -> str:
        return f"{self.count} comparison{'s' if self.count != 1 else ''} undecided: {self.reason}"

    @property
    def them(self) -> str:
        if self.decides is not None and self.decides < self.count:
            return f"{self.decides} of them"
        return "them" if self.count != 1 else "it"

    @property
    def then(self) -> str:
        return f"to decide {self.them}: {self.command}" if self.command else ""


@dataclass(frozen=True)
class Answers:
    title: str
    decided: list[Found] = field(default_factory=list)
    undecided: list[Undecided] = field(default_factory=list)

    def record(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "decided": [asdict(found) for found in self.decided],
            "undecided": [{**asdict(group), "text": group.text} for group in self.undecided],
        }


def answers_title(run_id: str, baseline: str, decided: DecidedRun | None) -> str:
    against = decided.baseline if decided is not None else baseline
    if against == FAMILY:
        against = "its family's native agent"
    if decided is not None:
        return f"What run {run_id} found (measured until decided, against {against})"
    return f"What run {run_id} found (every agent against {against})"


_RELATIONS = {FASTER: "faster than", SLOWER: "slower than", EQUIVALENT: "equivalent to"}


def grouped(decided: Sequence[Found]) -> list[tuple[str, str]]:
    """(verdict, line) for each decided answer, one line for an agent's same verdict against
    the same agent in several cells ("tf-eigen is slower than tf-mkl in 4 cells: 0.71x to
    0.72x"; the table under it names them), at its first's place."""
    groups: dict[tuple[str, str, str, str], list[Found]] = {}
    for line in decided:
        key = (line.agent, line.against, line.verdict, line.verdict_from)
        groups.setdefault(key, []).append(line)
    said = []
    for (agent, against, verdict, _), lines in groups.items():
        figures = [x.speedup for x in lines if x.speedup is not None]
        if len(lines) == 1 or verdict not in _RELATIONS or len(figures) != len(lines):
            said += [(verdict, line.text) for line in lines]
            continue
        span = f"{min(figures):.2f}x" + (
            f" to {max(figures):.2f}x" if f"{min(figures):.2f}" != f"{max(figures):.2f}" else ""
        )
        text = f"{agent} is {_RELATIONS[verdict]} {against} in {len(lines)} cells: {span}"
        unknown = sum(f"({UNKNOWN})" in line.text for line in lines)
        text += f" ({UNKNOWN} in {unknown})" if unknown else ""
        said.append((verdict, text))
    return said


def rich_answers(found: Answers) -> Text:
    """The answers for a terminal: decided lines in their verdict's colour (grouped), then
    each reason once with its command."""
    text = Text(found.title, style="bold")
    for verdict, line in grouped(found.decided):
        text.append("\n  ")
        text.append(line, style=STYLES.get(verdict, ""))
    if not found.decided:
        text.append("\n  Nothing decided.")
    for group in found.undecided:
        text.append("\n  ")
        text.append(group.text, style=STYLES[UNDECIDED])
        if group.then:
            text.append(f"\n    {group.then}")
    return text


def markdown_answers(found: Answers) -> list[str]:
    lines = [f"## {found.title}", ""]
    lines += [f"- **{verdict}**: {line}" for verdict, line in grouped(found.decided)]
    if not found.decided:
        lines.append("- Nothing decided.")
    for group in found.undecided:
        then = f"; to decide {group.them}: `{group.command}`" if group.command else ""
        lines.append(f"- {group.text}{then}")
    return [*lines, ""]


def footnoted(notes: Sequence[str], phrases: Iterable[str]) -> tuple[list[str], list[str]]:
    """Each of `phrases` found in two or more of `notes` said once, as a numbered note under
    the table: each note it was in names it ("note 1") instead; returns the notes and the
    numbered notes."""
    shown, said = list(notes), list[str]()
    for phrase in dict.fromkeys(p for p in phrases if p):
        rows = [i for i, note in enumerate(shown) if phrase in note]
        if len(rows) < 2:
            continue
        mark = f"note {len(said) + 1}"
        said.append(f"{mark} ({len(rows)} comparisons): {phrase}")
        for i in rows:
            shown[i] = shown[i].replace(phrase, mark)
    return shown, said


def repeated_phrases(decided: DecidedRun | None = None) -> list[str]:
    """The long notes a table repeats: what cannot be called and why, and why measuring
    until decided stopped."""
    return [*NEVER_CALLED.values(), decided.stopped if decided is not None else ""]
