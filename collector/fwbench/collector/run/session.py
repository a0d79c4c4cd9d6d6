"""One `collector run`, start to end: launch or attach agents, check them, plan, measure, persist,
always stop what was started. Nothing is written before every agent is up; resume.py alike."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from fwbench.collector.agents.launchers import Launcher
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.scratch import move_logs, scratch_folder
from fwbench.collector.run.decide import DecideSettings, Decisions, run_until_decided
from fwbench.collector.run.execute import RunContext, run_all
from fwbench.collector.run.launch import adopt, launch_all, make_launcher
from fwbench.collector.run.metadata import (
    agent_metadata,
    host_metadata,
    new_run_id,
    now,
    shared_nodes,
)
from fwbench.collector.run.normalize import RunCeilings
from fwbench.collector.run.options import RunOptions, options_record
from fwbench.collector.run.plan import (
    Selection,
    SelectionError,
    check_offered,
    plan_cells,
)
from fwbench.collector.run.progress import RichDisplay
from fwbench.collector.run.prometheus_targets import TargetsFile
from fwbench.collector.run.recording import Recorder, keep_logs
from fwbench.collector.run.resume import (
    ResumePoint,
    cells_to_skip,
    check_same_agents,
    kept_statuses,
    selection_record,
)
from fwbench.collector.run.schedule import stretches
from fwbench.collector.run.work import AgentWork
from fwbench.collector.store import PersistenceError, ResultStore, RunFolder
from fwbench.collector.store.owner import this_collector
from fwbench.collector.store.schema import SCHEMA_VERSION
from fwbench.spec import Catalogue

__all__ = ["RunOptions", "RunSummary", "execute_run", "run_status"]


@dataclass
class RunSummary:
    run_id: str
    out_dir: Path
    statuses: dict[str, int]
    interrupted: bool
    status: str = "ok"  # run_status(): ok, failed, incomplete or interrupted
    decisions: dict[str, Any] | None = None  # --until-decided: Decisions.record()


def run_status(statuses: dict[str, int], planned: int, interrupted: bool, escaped: str) -> str:
    """What a run's status says, in the store, run.json and the exit code: `ok` only when every
    planned cell was recorded ok or unsupported by its agent."""
    if interrupted:
        return "interrupted"
    if escaped or statuses.get("failed", 0) or statuses.get("cancelled", 0):
        return "failed"
    return "incomplete" if sum(statuses.values()) < planned else "ok"


def execute_run(
    options: RunOptions,
    selection: Selection,
    catalogue: Catalogue,
    manifests: dict[str, AgentManifest],
    console: Console,
    resume: ResumePoint | None = None,
) -> RunSummary:
    """Runs it all (with `resume`: the missing cells of that run); no agent the run started
    outlives it (for Docker: no container)."""
    run_id = resume.run_id if resume else new_run_id()
    out_dir = resume.out_dir if resume else options.out_dir or Path("fwbench-results") / run_id
    if resume is None and (out_dir / "run.json").exists():
        raise SelectionError(f"{out_dir} already holds a run; choose another --out")
    options = options.with_calibration(resume.metadata if resume else None)
    log_dir = scratch_folder("logs")
    try:
        launcher = make_launcher(options, run_id, log_dir, console)
    except BaseException:
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    try:
        return _execute(
            run_id,
            out_dir,
            log_dir,
            launcher,
            options,
            selection,
            catalogue,
            manifests,
            console,
            resume,
        )
    finally:
        launcher.close()  # what a Ctrl-C during start-up left half-started


def _execute(
    run_id: str,
    out_dir: Path,
    log_dir: Path,
    launcher: Launcher,
    options: RunOptions,
    selection: Selection,
    catalogue: Catalogue,
    manifests: dict[str, AgentManifest],
    console: Console,
    resume: ResumePoint | None,
) -> RunSummary:
    targets = TargetsFile.from_environment(run_id, report=console.print)  # unusable: bad input
    try:
        handles = launch_all(options.agents, manifests, launcher, options.start_timeout_seconds,
                             options.security, options)  # fmt: skip
    except BaseException as error:
        # A failed start keeps the agents' logs in the run folder (and says where); an
        # interrupted one keeps nothing.
        kept = move_logs(log_dir, out_dir / "logs") if isinstance(error, Exception) else []
        shutil.rmtree(log_dir, ignore_errors=True)
        for log in kept:
            console.print(f"agent log kept: {log}", highlight=False)
        raise
    work: list[AgentWork] = []
    try:
        work = adopt(handles, launcher, targets, options.agent_environment)
        check_offered(selection, {w.handle.name: w.describe for w in work})
        for item in work:
            item.cells = plan_cells(item.handle.name, item.describe, catalogue, selection)
        return _measure(run_id, out_dir, work, options, selection, catalogue, console, resume)
    finally:
        if targets is not None:
            targets.remove()
        for handle in [*handles, *(item.handle for item in work)]:
            handle.stop()  # idempotent; restarted instances are in `work`
        if out_dir.exists():
            keep_logs(log_dir, out_dir)
        else:
            shutil.rmtree(log_dir, ignore_errors=True)


def _measure(
    run_id: str,
    out_dir: Path,
    work: list[AgentWork],
    options: RunOptions,
    selection: Selection,
    catalogue: Catalogue,
    console: Console,
    resume: ResumePoint | None,
) -> RunSummary:
    decisions = None
    if options.until_decided_seconds is not None:
        baseline = options.baseline or work[0].handle.name
        settings = DecideSettings(
            baseline,
            options.noise_floor,
            options.margin,
            options.until_decided_seconds,
            selection.repeat,  # the most rounds
        )
        decisions = Decisions(settings, [])
        selection = dataclasses.replace(selection, repeat=1)  # rounds are decide.py's
    order = [
        (item.handle.name, cell, repetition)
        for item, stretch in stretches(work, selection.repeat, selection.fresh_process)
        for cell, repetition in stretch
    ]
    agents = {item.handle.name: agent_metadata(item.handle, item.describe) for item in work}
    calibration = options.calibration_now()
    folder, store = RunFolder(out_dir), ResultStore(options.store_path)
    if resume is None:
        skip: frozenset[int] = frozenset()
        metadata: dict[str, Any] = {
            "run_id": run_id,
            "schema_version": SCHEMA_VERSION,
            "command": options.command_line,
            "started_at": now(),
            "status": "running",
            "host": host_metadata(),
            "calibration": calibration,
            "collector": this_collector(),
            "options": options_record(options),
            "selection": selection_record(selection),
            "planned_cells": len(order),
            "agents": agents,
            "shared_nodes": shared_nodes([item.handle for item in work]),
        }
        for node, names in metadata["shared_nodes"].items():
            console.print(f"node {node} holds {', '.join(names)}: one measures at a time")
        folder.create()
        store.start_run(run_id, out_dir.resolve(), metadata["started_at"], metadata)
    else:
        check_same_agents(resume, {name: meta["describe"] for name, meta in agents.items()})
        skip = cells_to_skip(resume, [(cell, repetition) for _, cell, repetition in order])
        metadata = store.claim_run(run_id, this_collector())  # refuses a live collector's run
        store.forget_cells(run_id, resume.redo())
        for stale in ("finished_at", "error", "statuses"):
            metadata.pop(stale, None)
        metadata["status"] = "running"
        metadata.setdefault("resumed", []).append(
            {"at": now(), "command": options.command_line, "agents": agents}
        )
        folder.create()
    folder.write_metadata(metadata)
    recorder = Recorder(run_id, store, folder, RunCeilings(catalogue, calibration), metadata)
    todo: dict[str, int] = {item.handle.name: 0 for item in work}
    for index, (name, _, _) in enumerate(order):
        todo[name] += index not in skip
    ctx = RunContext(
        run_id,
        catalogue,
        selection,
        recorder,
        RichDisplay(console, todo, selection.swept),
        options.cell_timeout_seconds,
        options.scrape_interval_seconds,
        options.hang_timeout_seconds,
        statuses=kept_statuses(resume) if resume else {},
        skip=skip,
        interference_threshold=options.interference_threshold,
        quiet_host_seconds=options.quiet_host_seconds,
    )
    interrupted, escaped = False, ""
    try:
        with ctx.display:  # type: ignore[attr-defined]
            if decisions is None:
                run_all(work, ctx)
            else:
                spread_of = options.history(run_id, metadata) if options.history else None
                run_until_decided(work, ctx, decisions, ctx.display.new_round, spread_of)  # type: ignore[attr-defined]
    except KeyboardInterrupt:
        interrupted = True
    except PersistenceError as error:
        escaped = f"{type(error).__name__}: {error}"
        raise PersistenceError(
            f"{error}; every cell recorded before is kept; once there is room, `collector run "
            f"--resume {run_id}` measures the rest"
        ) from error
    except BaseException as error:
        escaped = f"{type(error).__name__}: {error}"
        raise
    finally:
        planned = len(order)
        if decisions is not None:
            metadata["until_decided"] = decisions.record()
            planned = ctx.next_index  # what the rounds scheduled
        _finish_run(store, folder, recorder, metadata, ctx.statuses, planned, interrupted, escaped)
    decided = metadata.get("until_decided")
    return RunSummary(run_id, out_dir, ctx.statuses, interrupted, metadata["status"], decided)


def _finish_run(
    store: ResultStore,
    folder: RunFolder,
    recorder: Recorder,
    metadata: dict[str, Any],
    statuses: dict[str, int],
    planned: int,
    interrupted: bool,
    escaped: str,
) -> None:
    """Records the run's end in the store and the folder, each as far as it can: a write that
    fails here (a full disk) is reported on stderr, never in place of the error that ended the
    run. A store that cannot record the end leaves the run `running`, which `collector results`
    shows as interrupted once this collector is gone, and `--resume` finishes."""
    status = run_status(statuses, planned, interrupted, escaped)
    metadata.update(finished_at=now(), statuses=dict(statuses), status=status)
    if escaped:
        metadata["error"] = escaped
    writes: list[Callable[[], None]] = [
        lambda: store.finish_run(metadata["run_id"], status, metadata["finished_at"], metadata),
        recorder.sync,
        lambda: folder.write_metadata(metadata),
    ]
    for write in writes:
        try:
            write()
        except PersistenceError as error:
            print(f"warning: the end of the run could not be recorded: {error}", file=sys.stderr)
    store.close()
