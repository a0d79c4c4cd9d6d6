"""One `collector run`, start to end: launch or attach agents, check them, plan, measure, persist,
always stop what was started. Nothing is written before every agent is up; resume.py alike."""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.scratch import mark_logs, scratch_folder
from fwbench.collector.launchers import AgentHandle, Launcher
from fwbench.collector.run.context import RunContext
from fwbench.collector.run.decide import DecideSettings, Decisions, run_until_decided
from fwbench.collector.run.defaults import DEFAULT_OUT
from fwbench.collector.run.execute import run_all
from fwbench.collector.run.launch import adopt, launch_all, make_launcher
from fwbench.collector.run.metadata import (
    agent_metadata,
    host_metadata,
    new_run_id,
    now,
    shared_nodes,
)
from fwbench.collector.run.model_prepare import plan_all
from fwbench.collector.run.model_prepared import PreparedModel
from fwbench.collector.run.normalize import RunCeilings
from fwbench.collector.run.options import RunOptions, options_record
from fwbench.collector.run.plan import Selection, SelectionError, check_offered
from fwbench.collector.run.progress import RichDisplay
from fwbench.collector.run.prometheus_targets import TargetsFile
from fwbench.collector.run.recording import Recorder, finish_run, keep_logs, run_status
from fwbench.collector.run.resume import (
    ResumePoint,
    cells_to_skip,
    check_same_agents,
    kept_statuses,
    selection_record,
    store_unsaved,
)
from fwbench.collector.run.schedule import stretches
from fwbench.collector.run.work import AgentWork
from fwbench.collector.store import PersistenceError, ResultStore, RunFolder
from fwbench.collector.store.owner import this_collector
from fwbench.collector.store.schema import SCHEMA_VERSION
from fwbench.spec import Catalogue

__all__ = ["DEFAULT_OUT", "RunOptions", "RunSummary", "execute_run", "run_status"]


@dataclass
class RunSummary:
    run_id: str
    out_dir: Path
    statuses: dict[str, int]
    interrupted: bool
    status: str = "ok"  # run_status(): ok, failed, incomplete or interrupted
    decisions: dict[str, Any] | None = None  # --until-decided: Decisions.record()


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
    out_dir = resume.out_dir if resume else options.out_dir or DEFAULT_OUT / run_id
    if resume is None and (out_dir / "run.json").exists():
        raise SelectionError(f"{out_dir} already holds a run; choose another --out")
    options = options.with_calibration(resume.metadata if resume else None)
    log_dir = scratch_folder("logs")
    try:
        mark_logs(log_dir, out_dir / "logs", resume.label if resume else "")
        launcher = make_launcher(options, run_id, log_dir, console, out_dir)
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
    label = resume.label if resume else ""  # of the logs' names in the run folder
    handles: list[AgentHandle] = []
    work: list[AgentWork] = []
    # A launcher whose idle agents hold an allocation starts them one at a time, each given
    # back once it has said what it is (AgentWork.rest; its first cell starts it again).
    one_at_a_time = getattr(launcher, "holds_allocation", False)
    batches = [[one] for one in options.agents] if one_at_a_time else [list(options.agents)]
    try:
        for batch in batches:
            started = launch_all(
                batch,
                manifests,
                launcher,
                options.limits.start_timeout_seconds,
                options.security,
                options,
                sizing=options.agents,
            )
            handles += started
            if one_at_a_time:
                work += adopt(started, launcher, targets, options.launch.agent_environment)
                work[-1].rest()
    except BaseException as error:
        for handle in handles:
            handle.stop()
        # A failed start keeps the agents' logs in the run folder (and says where); an
        # interrupted one keeps nothing.
        if isinstance(error, Exception):
            keep_logs(
                log_dir,
                out_dir,
                label,
                lambda log: console.print(f"agent log kept: {log}", highlight=False),
            )
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    try:
        if not one_at_a_time:
            work = adopt(handles, launcher, targets, options.launch.agent_environment)
        check_offered(selection, {w.handle.name: w.describe for w in work})
        model = plan_all(work, catalogue, selection, options, out_dir, console.print)
        return _measure(
            run_id, out_dir, work, options, selection, catalogue, console, resume, model
        )
    finally:
        if targets is not None:
            targets.remove()
        for handle in [*handles, *(item.handle for item in work)]:
            handle.stop()  # idempotent; restarted instances are in `work`
        if out_dir.exists():
            keep_logs(log_dir, out_dir, label)
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
    model: PreparedModel | None = None,
) -> RunSummary:
    decisions = None
    if options.decision.until_decided_seconds is not None:
        baseline = options.decision.baseline or work[0].handle.name
        settings = DecideSettings(
            baseline,
            options.decision.noise_floor,
            options.decision.margin,
            options.decision.until_decided_seconds,
            selection.repeat,  # the most rounds
        )
        decisions = Decisions(settings, [])
        selection = dataclasses.replace(selection, repeat=1)  # rounds are decide.py's
    order = [
        (item.handle.name, cell, repetition)
        for item, stretch in stretches(work, selection.repeat, selection.fresh_process)
        for cell, repetition in stretch
    ]
    # An agent given back after it described itself (one at a time) measured in a later
    # process: this one's facts are of the process that described it; rows say their own.
    agents = {
        item.handle.name: {**agent_metadata(item.handle, item.describe), "described_only": True}
        if item.idle
        else agent_metadata(item.handle, item.describe)
        for item in work
    }
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
            # (agents given back after describing themselves hold nothing while others run)
            "shared_nodes": shared_nodes([item.handle for item in work if not item.idle]),
        }
        for node, names in metadata["shared_nodes"].items():
            console.print(f"node {node} holds {', '.join(names)}: one measures at a time")
    else:
        check_same_agents(resume, {name: meta["describe"] for name, meta in agents.items()})
        plan = [(cell, repetition) for _, cell, repetition in order]
        cells_to_skip(resume, plan)  # refuses a changed plan before anything is written
        # Refuses a live collector's run; records this resume at once (kept if it is killed).
        resumed = {"at": now(), "command": options.command_line, "agents": agents}
        metadata = store.claim_run(run_id, this_collector(), resumed)
        store.forget_cells(run_id, resume.redo())
        for line in store_unsaved(store, run_id, folder):  # measured, the store was full
            console.print(line, highlight=False)
        resume = dataclasses.replace(resume, rows=store.results(run_id))
        skip = cells_to_skip(resume, plan)
    folder.create()  # with its reserve, given back at the end (store/folder.py)
    try:
        if resume is None:
            store.start_run(run_id, out_dir.resolve(), metadata["started_at"], metadata)
        folder.write_metadata(metadata)
    except BaseException:
        folder.release()
        raise
    kept = kept_statuses(resume) if resume else {}
    ceilings = RunCeilings(catalogue, calibration)
    recorder = Recorder(run_id, store, folder, ceilings, metadata, kept)
    todo: dict[str, int] = {item.handle.name: 0 for item in work}
    for index, (name, _, _) in enumerate(order):
        todo[name] += index not in skip
    ctx = RunContext(
        run_id,
        catalogue,
        selection,
        recorder,
        RichDisplay(console, todo, selection.swept),
        options.limits.cell_timeout_seconds,
        options.telemetry.scrape_interval_seconds,
        options.limits.hang_timeout_seconds,
        skip=skip,
        interference_threshold=options.telemetry.interference_threshold,
        quiet_host_seconds=options.telemetry.quiet_host_seconds,
        model=model,
        run_folder=folder.path,
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
        finish_run(recorder, metadata, planned, interrupted, escaped)
    statuses, decided = metadata["statuses"], metadata.get("until_decided")
    return RunSummary(run_id, out_dir, statuses, interrupted, metadata["status"], decided)
