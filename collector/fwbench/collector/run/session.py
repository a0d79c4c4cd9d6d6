"""One `collector run`, start to end: launch or attach agents, check them, plan, measure,
persist, and always stop what was started. Nothing is written before every agent is up."""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.docker_engine import docker_client
from fwbench.collector.agents.launchers import (
    DEFAULT_PIDS_LIMIT,
    AgentHandle,
    Launcher,
    LauncherKind,
    LaunchSettings,
    launcher_for,
)
from fwbench.collector.agents.launchers.attached import attach
from fwbench.collector.agents.launchers.docker import remove_orphans
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.scratch import move_logs, scratch_folder
from fwbench.collector.agents.specs import AgentSpecError, base_name, parse_attached
from fwbench.collector.images.build import ensure_image
from fwbench.collector.run.execute import RunContext, run_all
from fwbench.collector.run.liveness import HANG_SECONDS
from fwbench.collector.run.metadata import agent_metadata, host_metadata, new_run_id, now
from fwbench.collector.run.plan import (
    Selection,
    SelectionError,
    check_modes_offered,
    plan_cells,
)
from fwbench.collector.run.progress import RichDisplay
from fwbench.collector.run.recording import Recorder, keep_logs
from fwbench.collector.run.schedule import cells_per_agent
from fwbench.collector.run.telemetry import DEFAULT_INTERVAL_SECONDS
from fwbench.collector.run.work import AgentWork
from fwbench.collector.store import PersistenceError, ResultStore, RunFolder
from fwbench.collector.store.schema import SCHEMA_VERSION
from fwbench.spec import Catalogue


@dataclass(frozen=True)
class RunOptions:
    agents: tuple[str, ...]
    out_dir: Path | None
    store_path: Path
    cell_timeout_seconds: float | None
    start_timeout_seconds: float
    command_line: str
    # Seconds between /metrics scrapes during each cell; None turns scraping off.
    scrape_interval_seconds: float | None = DEFAULT_INTERVAL_SECONDS
    # Seconds without a heartbeat before an agent counts as hung; None = only the cell timeout.
    hang_timeout_seconds: float | None = HANG_SECONDS
    launcher: LauncherKind = LauncherKind.LOCAL  # how agents given by name are started
    cpuset: str = ""  # docker: CPUs each container is pinned to ("0-1"); "" = all
    memory: str = ""  # docker: each container's memory limit ("8g"); "" = the default share
    pids_limit: int = DEFAULT_PIDS_LIMIT  # docker: each container's process limit


@dataclass
class RunSummary:
    run_id: str
    out_dir: Path
    statuses: dict[str, int]
    interrupted: bool
    status: str = "ok"  # run_status(): ok, failed, incomplete or interrupted


def make_launcher(options: RunOptions, run_id: str, log_dir: Path, console: Console) -> Launcher:
    """The launcher options.launcher names; the Docker one builds stale images before use."""
    image_for = None
    if options.launcher == LauncherKind.DOCKER:
        client = docker_client()
        image_for = lambda manifest: ensure_image(client, manifest, console.print)  # noqa: E731
    settings = LaunchSettings(
        run_id=run_id,
        log_dir=log_dir,
        report=console.print,
        start_timeout_seconds=options.start_timeout_seconds,
        cpuset=options.cpuset,
        memory=options.memory,
        pids_limit=options.pids_limit,
        image_for=image_for,
    )
    return launcher_for(options.launcher, settings)


def launch_all(
    specs: Sequence[str],
    manifests: dict[str, AgentManifest],
    launcher: Launcher,
    timeout: float,
) -> list[AgentHandle]:
    """Starts or attaches every agent side by side; on any failure stops those started and
    re-raises."""

    def one(spec: str) -> AgentHandle:
        attached = parse_attached(spec)
        if attached:
            return attach(*attached, timeout_seconds=min(timeout, 10.0))
        return launcher.start(manifests[base_name(spec)], spec, 0)

    with ThreadPoolExecutor(max_workers=len(specs)) as pool:
        futures = [pool.submit(one, spec) for spec in specs]
    handles, errors = [], []
    for future in futures:
        try:
            handles.append(future.result())
        except Exception as error:  # noqa: BLE001 (collected, re-raised below)
            errors.append(error)
    if errors:
        for handle in handles:
            handle.stop()
        raise errors[0]
    return handles


def run_status(statuses: dict[str, int], planned: int, interrupted: bool, escaped: str) -> str:
    """What a run's status says, in the store, run.json and the exit code: `ok` only when every
    planned cell was recorded ok or unsupported by its agent."""
    if interrupted:
        return "interrupted"
    if escaped or statuses.get("failed", 0) or statuses.get("cancelled", 0):
        return "failed"
    return "incomplete" if sum(statuses.values()) < planned else "ok"


def check_identity(handle: AgentHandle, describe: agent_pb2.DescribeResponse) -> None:
    """An attached agent is what its NAME@ says, or the run is refused (AgentSpecError) before
    anything is written: rows are labelled with NAME, so a wrong one would mislabel them."""
    said, actual = base_name(handle.name), describe.identity.name
    if handle.kind != "attached" or said == actual:
        return
    what = describe.identity
    raise AgentSpecError(
        f"the agent at {handle.address} is {actual!r} ({what.framework} "
        f"{what.framework_version}, variant {what.variant or '-'}), not {said!r}; attach it as "
        f"{actual}@{handle.address}"
    )


def _restarter(
    manifest: AgentManifest, launcher: Launcher, instance: str
) -> Callable[[int], AgentHandle]:
    return lambda threads: launcher.start(manifest, instance, threads)


def execute_run(
    options: RunOptions,
    selection: Selection,
    catalogue: Catalogue,
    manifests: dict[str, AgentManifest],
    console: Console,
) -> RunSummary:
    """Runs it all; no agent the run started outlives it (for Docker: no container)."""
    run_id = new_run_id()
    out_dir = options.out_dir or Path("fwbench-results") / run_id
    if (out_dir / "run.json").exists():
        raise SelectionError(f"{out_dir} already holds a run; choose another --out")
    if options.launcher == LauncherKind.DOCKER:
        remove_orphans()
    log_dir = scratch_folder("logs")
    try:
        launcher = make_launcher(options, run_id, log_dir, console)
    except BaseException:
        shutil.rmtree(log_dir, ignore_errors=True)
        raise
    try:
        return _execute(
            run_id, out_dir, log_dir, launcher, options, selection, catalogue, manifests, console
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
) -> RunSummary:
    try:
        handles = launch_all(options.agents, manifests, launcher, options.start_timeout_seconds)
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
        for handle in handles:
            restart = None
            if handle.manifest is not None:
                restart = _restarter(handle.manifest, launcher, handle.name)
            describe = handle.client.describe()
            check_identity(handle, describe)
            if not handle.metrics_address and describe.metrics_port:
                # Attached: the agent's own port, on the host the collector reaches it at.
                host = handle.address.rpartition(":")[0]
                handle.metrics_address = f"{host}:{describe.metrics_port}"
            work.append(AgentWork(handle, describe, [], restart))
        check_modes_offered(selection.modes, {w.handle.name: w.describe for w in work})
        for item in work:
            item.cells = plan_cells(item.handle.name, item.describe, catalogue, selection)
        return _measure(run_id, out_dir, work, options, selection, catalogue, console)
    finally:
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
) -> RunSummary:
    metadata: dict[str, Any] = {
        "run_id": run_id,
        "schema_version": SCHEMA_VERSION,
        "command": options.command_line,
        "started_at": now(),
        "status": "running",
        "host": host_metadata(),
        "selection": json.loads(json.dumps(selection, default=lambda o: o.__dict__)),
        "agents": {item.handle.name: agent_metadata(item.handle, item.describe) for item in work},
    }
    folder = RunFolder(out_dir)
    folder.create()
    store = ResultStore(options.store_path)
    store.start_run(run_id, out_dir.resolve(), metadata["started_at"], metadata)
    folder.write_metadata(metadata)
    recorder = Recorder(run_id, store, folder)
    counts = cells_per_agent(work, selection.repeat, selection.fresh_process)
    cells = {item.handle.name: count for item, count in zip(work, counts, strict=True)}
    ctx = RunContext(
        run_id,
        catalogue,
        selection,
        recorder,
        RichDisplay(console, cells),
        options.cell_timeout_seconds,
        options.scrape_interval_seconds,
        options.hang_timeout_seconds,
    )
    interrupted, escaped = False, ""
    try:
        with ctx.display:  # type: ignore[attr-defined]
            run_all(work, ctx)
    except KeyboardInterrupt:
        interrupted = True
    except BaseException as error:
        escaped = f"{type(error).__name__}: {error}"
        raise
    finally:
        status = run_status(ctx.statuses, sum(counts), interrupted, escaped)
        metadata.update(finished_at=now(), statuses=ctx.statuses, status=status)
        if escaped:
            metadata["error"] = escaped
        with contextlib.suppress(PersistenceError):  # the original error matters more
            store.finish_run(run_id, metadata["status"], metadata["finished_at"], metadata)
            recorder.sync()
            folder.write_metadata(metadata)
        store.close()
    return RunSummary(run_id, out_dir, ctx.statuses, interrupted, metadata["status"])
