"""Why each cell that did not measure did not: one line per such row under the run's table
(`collector run`, `collector results RUN`) and in the report's "Cells not measured", so that
an unsupported or failed cell's reason is read in full where its status column is cut to fit
the terminal, and no such cell is shown without it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

MOST_LINES = 12  # then how many more, and where all of them are


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


def cell_name(row: Mapping[Any, Any]) -> str:
    """AGENT WORKLOAD PHASE bs=N [mode] [strategy]: how a row's cell is named in a line."""
    parts = [row["agent"], row["workload"], row["phase"], f"bs={row['batch_size']}"]
    parts += [text for key in ("mode", "strategy") if (text := _text(row.get(key)))]
    return " ".join(str(part) for part in parts)


def _why(row: Mapping[Any, Any]) -> str:
    return _text(row.get("error")) or _text(row.get("error_code")) or "no reason recorded"


def reason_lines(rows: Iterable[Mapping[Any, Any]], run: str) -> list[str]:
    """`STATUS: CELL: REASON` for each row that is not ok, at most MOST_LINES of them, then a
    line that says how many more and the command that lists them all."""
    lines = [
        f"{row['status']}: {cell_name(row)}: {_why(row)}" for row in rows if row["status"] != "ok"
    ]
    if len(lines) <= MOST_LINES:
        return lines
    more = len(lines) - MOST_LINES
    return [*lines[:MOST_LINES], f"... and {more} more: collector results {run} --json"]
