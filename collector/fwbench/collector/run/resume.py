"""`collector run --resume RUN_ID`: finishing a run that a killed or interrupted collector, or
a write error, left short. The run's own selection and settings are read back from the store;
the agents must be the ones that measured it (same framework, version, variant and plugin);
the plan is made again and must give every recorded cell the same place; then only the cells
with no row (and those cancelled by an interrupt, which hold no measurement) are measured, into
the same run, with their planned cell numbers."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from fwbench.collector.run.plan import Cell, LoopSettings, Selection
from fwbench.collector.store import ResultStore
from fwbench.collector.store.cell_key import CellKey
from fwbench.collector.store.database import saving
from fwbench.collector.store.folder import RunFolder
from fwbench.collector.store.owner import ResumeRefused, collector_gone, owner_text

# What identifies a cell in a plan and in a recorded row: the agent, the repetition and the
# cell's key as asked for (CellKey.as_asked: a row holds the dtype, mode and strategy the agent
# ran, which may differ from those asked for).
Planned = tuple[str, int, CellKey]
_IDENTITY = ("framework", "framework_version", "variant", "plugin_version")
_TUPLES = (
    "workloads",
    "phases",
    "batch_sizes",
    "dtypes",
    "threads",
    "modes",
    "strategies",
    "agents",
)


def selection_record(selection: Selection) -> dict[str, Any]:
    return dict(json.loads(json.dumps(selection, default=lambda o: o.__dict__)))


def selection_from_record(record: Mapping[str, Any]) -> Selection:
    values = {f.name: record[f.name] for f in fields(Selection) if f.name in record}
    for name in _TUPLES:
        if name in values:
            values[name] = tuple(values[name])
    values["loop"] = LoopSettings(**record.get("loop", {}))
    # A run before sweeps recorded one value per parameter.
    values["params"] = {
        name: tuple(value) if isinstance(value, list) else (value,)
        for name, value in record.get("params", {}).items()
    }
    return Selection(**values)


@dataclass(frozen=True)
class ResumePoint:
    """A run to finish: its id, folder, stored metadata, and what its rows already hold."""

    run_id: str
    out_dir: Path
    metadata: dict[str, Any]
    rows: pd.DataFrame

    @property
    def options(self) -> dict[str, Any]:
        """The run's recorded options (RunOptions fields), agents as a tuple."""
        options = dict(self.metadata["options"])
        options["agents"] = tuple(options["agents"])
        return options

    @property
    def label(self) -> str:
        """This resume's in the names of its agents' logs: resume-N, N counting resumes (one
        killed too) of the run."""
        return f"resume-{len(self.metadata.get('resumed', [])) + 1}"

    @property
    def selection(self) -> Selection:
        return selection_from_record(self.metadata["selection"])

    def redo(self) -> list[int]:
        """Recorded cells measured again: those an interrupt cancelled."""
        if self.rows.empty:
            return []
        return [int(cell) for cell in self.rows.loc[self.rows["status"] == "cancelled", "cell"]]

    def kept(self) -> pd.DataFrame:
        return self.rows[~self.rows["cell"].isin(self.redo())] if len(self.rows) else self.rows


def resume_point(store: ResultStore, run_id: str) -> ResumePoint:
    """Reads a run back for resuming, refusing (ResumeRefused) one that cannot be: unknown,
    still measured by a live collector, stored without its options (before resuming existed),
    or already complete."""
    metadata = store.run_metadata(run_id)
    if metadata is None:
        raise ResumeRefused(
            f"no run {run_id!r} in {store.path}; `collector results` lists the runs"
        )
    status = metadata.get("status")
    if status == "running" and not collector_gone(metadata.get("collector")):
        raise ResumeRefused(f"run {run_id} is {owner_text(metadata)}")
    if "options" not in metadata:
        raise ResumeRefused(
            f"run {run_id} was stored by an older collector that did not record its options; "
            "it cannot be resumed"
        )
    if metadata["options"].get("until_decided_seconds") is not None:
        raise ResumeRefused(
            f"run {run_id} was measured --until-decided: its rounds and looks cannot be "
            "continued; start a new run"
        )
    runs = store.runs()
    out_dir = Path(runs.loc[runs["run_id"] == run_id, "out_dir"].iloc[0])
    point = ResumePoint(run_id, out_dir, metadata, store.results(run_id))
    planned = int(metadata.get("planned_cells", 0))
    if status == "ok" or (planned and len(point.kept()) >= planned):
        raise ResumeRefused(
            f"run {run_id} has all its {planned or len(point.rows)} cells recorded "
            f"(status {status}); nothing to resume"
        )
    return point


def check_same_agents(point: ResumePoint, described: Mapping[str, Mapping[str, Any]]) -> None:
    """The agents started now are those that measured the run (name -> Describe as a dict)."""
    before: Mapping[str, Any] = point.metadata.get("agents", {})
    if set(before) != set(described):
        raise ResumeRefused(
            f"run {point.run_id} was measured by {', '.join(sorted(before))}, not "
            f"{', '.join(sorted(described))}"
        )
    for name, now in described.items():
        was = before[name].get("describe", {}).get("identity", {})
        is_ = now.get("identity", {})
        changed = [
            f"{key} {was.get(key)!r} -> {is_.get(key)!r}"
            for key in _IDENTITY
            if was.get(key, "") != is_.get(key, "")
        ]
        if changed:
            raise ResumeRefused(
                f"agent {name} changed since run {point.run_id} was measured ("
                f"{'; '.join(changed)}): its rows would not be comparable; start a new run"
            )


def planned_key(cell: Cell, repetition: int) -> Planned:
    return cell.agent, repetition, cell.key.as_asked()


def row_key(row: Mapping[str, Any]) -> Planned:
    repetition = row.get("repetition")
    repetition = 0 if repetition is None or pd.isna(repetition) else int(repetition)
    return str(row["agent"]), repetition, CellKey.of_row(row).as_asked()


def cells_to_skip(point: ResumePoint, order: Sequence[tuple[Cell, int]]) -> frozenset[int]:
    """The planned cell numbers that already hold a kept row; refuses a plan that puts a
    recorded cell elsewhere (the catalogue or an agent's offer changed)."""
    kept = point.kept()
    planned = [planned_key(cell, repetition) for cell, repetition in order]
    for row in _records(kept):
        index = int(row["cell"])
        if index >= len(planned) or planned[index] != row_key(row):
            raise ResumeRefused(
                f"run {point.run_id}: cell {index} ({row['agent']} {row['workload']} "
                f"{row['phase']} bs={row['batch_size']}) is not where the plan made now puts "
                "it (the catalogue, an agent's workloads or the collector's schedule changed); "
                "start a new run"
            )
    return frozenset(int(cell) for cell in kept["cell"]) if len(kept) else frozenset()


def kept_statuses(point: ResumePoint) -> dict[str, int]:
    kept = point.kept()
    if kept.empty:
        return {}
    return {str(k): int(v) for k, v in kept["status"].value_counts().items()}


def _records(frame: pd.DataFrame) -> Iterable[dict[str, Any]]:
    return [{str(k): v for k, v in row.items()} for row in frame.to_dict("records")]


def store_unsaved(store: ResultStore, run_id: str, folder: RunFolder) -> list[str]:
    """Stores the cells the run measured but could not save (its store's disk full: the run
    folder's unsaved/), each then moved to unsaved/stored/; one the store already holds stays
    where it is. Returns what was done, a line per cell."""
    held = {int(cell) for cell in store.results(run_id).get("cell", [])}
    said = []
    for path, record in folder.unsaved():
        cell = int(record["row"]["cell"])
        if cell in held:
            said.append(f"cell {cell}: {path} not stored, the store already holds that cell")
            continue
        samples = record["sample_nanoseconds"]
        store.add_encoded(run_id, record["row"], samples, record["telemetry"])
        held.add(cell)
        with saving(str(path)):
            (path.parent / "stored").mkdir(exist_ok=True)
            path.rename(path.parent / "stored" / path.name)
        said.append(f"cell {cell}: stored from {path} ({len(samples)} samples measured before)")
    return said
