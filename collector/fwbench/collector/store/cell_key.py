"""A cell's key: what every agent of a run measures alike in one cell, so that rows with the
same key are compared (analysis), scheduled together (run/schedule.py), decided together
(run/questions.py) and matched to the plan when a run resumes (run/resume.py). The agent's
mode is not in it (each agent's own); a world's strategy is (ddp and pipeline are two
computations, never repetitions of one). Built from a planned cell (run/plan.py's Cell.key)
or from a result row (`CellKey.of_row`); the same cell gives the same key either way."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any, NamedTuple

# The results table's columns, in CellKey's order.
KEY_COLUMNS = (
    "workload",
    "phase",
    "batch_size",
    "dtype",
    "threads_requested",
    "params",
    "strategy",
)


def clean(value: Any) -> Any:
    """None for a missing value (None, pandas' NA, NaN), else the value."""
    try:
        missing = value is None or bool(value != value)
    except TypeError:  # pandas' NA answers NA to every comparison
        missing = True
    return None if missing else value


def params_text(params: Mapping[str, Any]) -> str:
    """A cell's shape parameters as the table's `params` column holds them: JSON, keys sorted."""
    return json.dumps(dict(sorted(params.items())))


class CellKey(NamedTuple):
    """A row's fields are None where the table holds nothing (a row of an older schema)."""

    workload: str
    phase: str
    batch_size: int
    dtype: str | None
    threads: int | None  # the threads asked for (0: the agent's default)
    params: str | None  # params_text
    strategy: str | None  # a world's; None: alone, or the agent's default asked for

    @classmethod
    def of_row(cls, row: Mapping[Any, Any]) -> CellKey:
        """The cell a row (stored JSON or a results-frame record) measured."""
        return cls(*(clean(row.get(column)) for column in KEY_COLUMNS))

    def as_asked(self) -> CellKey:
        """Without what a row holds as it was run rather than as asked for (dtype, strategy):
        what a recorded row and its planned cell agree on, whatever the agent chose."""
        return self._replace(dtype=None, strategy=None)

    def label(self, shown: Collection[str] = ()) -> str:
        """The cell's name; `shown`: the shape parameters to name too (varying_params: those a
        run swept, without which two of its cells would read the same)."""
        text = f"{self.workload} {self.phase} bs={self.batch_size} {self.dtype}"
        values = json.loads(self.params or "{}") if shown else {}
        text += "".join(f" {name}={values[name]}" for name in sorted(shown) if name in values)
        threads = f" t={self.threads}" if self.threads else ""
        return text + threads + (f" {self.strategy}" if self.strategy else "")


def varying_params(keys: Iterable[CellKey]) -> set[str]:
    """The shape parameters that take more than one value among the cells of `keys`."""
    seen: dict[str, set[object]] = {}
    for key in keys:
        for name, value in json.loads(key.params or "{}").items():
            seen.setdefault(name, set()).add(value)
    return {name for name, values in seen.items() if len(values) > 1}
