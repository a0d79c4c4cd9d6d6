"""What comparisons are made of: a stored run's rows and samples, grouped into contenders.

A cell is identified by its CellKey (store/cell_key.py); within it a contender is an agent in
the mode it actually ran. The samples of every repetition of a contender's cell are pooled (as
groups, one per repetition, for the cluster bootstrap). Only ok rows with samples are
contenders; the failed processes of each contender's cell come with it (`failed`), so that no
comparison is made from the processes that finished as though they were all there were.
Interfered processes (other processes took the agent's CPUs while they were timed,
run/interference.py) are left out of the groups and named (`interfered`); a contender all of
whose processes were interfered keeps them as its groups, `clean` False, to be described and
never called."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from fwbench.collector.stats.bootstrap import FloatArray
from fwbench.collector.stats.failures import FAILED, failure_text
from fwbench.collector.stats.samples import is_noisy
from fwbench.collector.store import ResultStore
from fwbench.collector.store.cell_key import KEY_COLUMNS, CellKey, clean
from fwbench.collector.store.interference_columns import UNKNOWN, UNKNOWN_WHY, interference_unknown


class ComparisonError(ValueError):
    """The comparison asked for cannot be made; the message says why and what can."""


@dataclass(frozen=True)
class RunData:
    run_id: str
    results: pd.DataFrame
    samples: pd.DataFrame
    metadata: dict[str, Any] = field(default_factory=dict)


def load_run(store: ResultStore, run_id: str) -> RunData:
    """`run_id`: a run's ID, or its folder (`--out`; the ID is read from its run.json)."""
    run_id = run_id_of(run_id)
    metadata = store.run_metadata(run_id)
    if metadata is None:
        raise ComparisonError(f"no run {run_id!r} in {store.path}; `collector results` lists them")
    return RunData(run_id, store.results(run_id), store.samples(run_id), metadata)


def run_id_of(given: str) -> str:
    """A run's ID as given, or read from the run.json of the folder given."""
    folder = Path(given)
    if not folder.is_dir():
        return given
    try:
        found = json.loads((folder / "run.json").read_text()).get("run_id")
    except (OSError, ValueError, AttributeError) as error:
        raise ComparisonError(
            f"{given} is a folder without a readable run.json: {error}"
        ) from error
    if not isinstance(found, str) or not found:
        raise ComparisonError(f"{folder / 'run.json'} names no run_id")
    return found


@dataclass(frozen=True)
class Contender:
    """One agent's cell in one mode: the samples of each repetition, pooled facts."""

    agent: str
    mode: str
    key: CellKey
    groups: tuple[FloatArray, ...]
    cells: tuple[int, ...]  # the rows' cell indices, one per group
    # This agent's processes (repetitions) that failed in this cell: "ERROR_CODE: error" each.
    failed: tuple[str, ...] = ()
    # Its processes here that ran otherwise than asked: their settings_mismatch, each.
    otherwise: tuple[str, ...] = ()
    # Its processes here that were interfered, each's `interference`: left out of `groups`
    # unless every process was (`clean` False: the groups are theirs, never to be called).
    interfered: tuple[str, ...] = ()
    clean: bool = True
    # How many of its processes here could not be judged for interference (their agent
    # exported no affinity series, or nothing was scraped): kept, and the verdict says so.
    unknown: int = 0
    # Its processes here whose outputs differ from the reference's (a model file): each's
    # outputs_note.
    differed: tuple[str, ...] = ()

    @property
    def first_cell(self) -> int:
        return self.cells[0]

    @property
    def n(self) -> int:
        return sum(g.size for g in self.groups)

    @property
    def median_seconds(self) -> float:
        return float(np.median(np.concatenate(self.groups)))

    @property
    def noisy(self) -> bool:
        pooled = np.concatenate(self.groups)
        cv = float(pooled.std(ddof=1) / pooled.mean()) if pooled.size > 1 else math.nan
        return is_noisy(pooled.size, cv)


def samples_by_cell(samples: pd.DataFrame) -> dict[int, FloatArray]:
    """The long samples table (cell, iteration, seconds) as one array per cell."""
    cells = samples["cell"].to_numpy(dtype=np.int64)
    seconds = samples["seconds"].to_numpy(dtype=np.float64)
    if not cells.size:  # a run interrupted before any sample
        return {}
    order = np.argsort(cells, kind="stable")
    found, starts = np.unique(cells[order], return_index=True)
    parts = np.split(seconds[order], starts[1:])
    return {int(cell): part for cell, part in zip(found, parts, strict=True)}


def failures(run: RunData) -> dict[tuple[str, str, CellKey], list[str]]:
    """Each agent's failed processes per mode and cell (status "failed": the process crashed,
    hung, ran out of memory, or answered what the protocol forbids), in execution order, as
    "ERROR_CODE: error". An interrupt's cancelled cells are not failures."""
    found: dict[tuple[str, str, CellKey], list[str]] = {}
    results = run.results  # the columns read below: a whole row costs far more
    read = ["cell", "agent", "mode", "error_code", "error", *KEY_COLUMNS]
    failed = results.loc[results["status"] == FAILED, [c for c in read if c in results]]
    failed = failed.sort_values("cell")
    for row in failed.to_dict("records"):
        text = failure_text(clean(row.get("error_code")), clean(row.get("error")))
        found.setdefault((row["agent"], clean(row["mode"]) or "", CellKey.of_row(row)), []).append(
            text
        )
    return found


def failed_note(agent: str, contender: Contender) -> str:
    """What a note says of a contender's failed processes; "" when none failed."""
    if not contender.failed:
        return ""
    count = len(contender.failed)
    total = count + len(contender.groups)
    return f"{count} of {agent}'s {total} processes failed here ({contender.failed[-1]})"


def differed_note(agent: str, contender: Contender) -> str:
    """What a note says of a contender's processes whose outputs differ from the reference's;
    "" when none did."""
    if not contender.differed:
        return ""
    count, total, last = len(contender.differed), len(contender.groups), contender.differed[-1]
    return f"{count} of {agent}'s {total} processes: outputs differ from the reference's ({last})"


def otherwise_note(agent: str, contender: Contender) -> str:
    """What a note says of a contender's processes that ran otherwise than asked; "" when
    none did."""
    if not contender.otherwise:
        return ""
    count, total, last = len(contender.otherwise), len(contender.groups), contender.otherwise[-1]
    return f"{count} of {agent}'s {total} processes ran otherwise than asked ({last})"


def unknown_note(agent: str, contender: Contender) -> str:
    """What a note says of a contender's processes whose interference is unknown."""
    if not contender.unknown:
        return ""
    count, total = contender.unknown, len(contender.groups)
    which = f"all {count}" if count == total else f"{count} of {total}"
    return f"{UNKNOWN} for {which} of {agent}'s processes here: {UNKNOWN_WHY}"


def interfered_note(agent: str, contender: Contender) -> str:
    """What a note says of a contender's interfered processes; "" when none was."""
    if not contender.interfered:
        return ""
    count, last = len(contender.interfered), contender.interfered[-1]
    if not contender.clean:
        return f"every one of {agent}'s {count} processes here was interfered ({last})"
    total = count + len(contender.groups)
    return f"{count} of {agent}'s {total} processes left out, interfered ({last})"


def contenders(run: RunData) -> list[Contender]:
    """Every agent's ok cells with samples, repetitions grouped, in execution order, each with
    its failed processes in the same cell and mode (or asked for in its default mode) and its
    interfered ones."""
    by_cell = samples_by_cell(run.samples)
    failed = failures(run)
    found: dict[tuple[str, str, CellKey], list[tuple[int, FloatArray]]] = {}
    spoiled: dict[tuple[str, str, CellKey], list[tuple[int, FloatArray, str]]] = {}
    otherwise: dict[tuple[str, str, CellKey], list[str]] = {}
    differed: dict[tuple[str, str, CellKey], list[str]] = {}
    unknown: dict[tuple[str, str, CellKey], int] = {}
    ok = run.results[run.results["status"] == "ok"].sort_values("cell")
    for row in ok.to_dict("records"):
        values = by_cell.get(int(row["cell"]))
        if values is None or not values.size:
            continue
        key = CellKey.of_row(row)
        mode = clean(row["mode"]) or ""
        side = (row["agent"], mode, key)
        if bool(clean(row.get("interfered"))):
            why = clean(row.get("interference")) or "interfered"
            spoiled.setdefault(side, []).append((int(row["cell"]), values, why))
            found.setdefault(side, [])
        else:
            found.setdefault(side, []).append((int(row["cell"]), values))
        if clean(row.get("settings_mismatch")):
            otherwise.setdefault(side, []).append(row["settings_mismatch"])
        if clean(row.get("outputs_match")) is False:
            differed.setdefault(side, []).append(clean(row.get("outputs_note")) or "differ")
        unknown[side] = unknown.get(side, 0) + interference_unknown(row)
    found_contenders = []
    for (agent, mode, key), groups in found.items():
        # A failed row holds the mode asked for: "" (the agent's default) or a name.
        lost = failed.get((agent, mode, key), [])
        lost = lost + failed.get((agent, "", key), []) if mode else lost
        left_out = spoiled.get((agent, mode, key), [])
        kept = groups or [(cell, values) for cell, values, _ in left_out]
        arrays, indices = tuple(v for _, v in kept), tuple(c for c, _ in kept)
        asked = tuple(otherwise.get((agent, mode, key), []))
        found_contenders.append(
            Contender(
                agent,
                mode,
                key,
                arrays,
                indices,
                tuple(lost),
                asked,
                tuple(why for _, _, why in left_out),
                clean=bool(groups),
                unknown=unknown.get((agent, mode, key), 0),
                differed=tuple(differed.get((agent, mode, key), [])),
            )
        )
    return found_contenders


def every_process_failed(run: RunData, cells: list[Contender]) -> list[str]:
    """The agents' cells in `run` with failed processes and not one that finished: they are
    no contender, and a comparison set says so rather than leaving them out unsaid."""
    present = {(c.agent, c.key) for c in cells}
    said: dict[tuple[str, CellKey], str] = {}
    for (agent, _, key), texts in failures(run).items():
        if (agent, key) not in present:
            said[(agent, key)] = f"{agent} {key.label()}: every process failed ({texts[-1]})"
    return list(said.values())
