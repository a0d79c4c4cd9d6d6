"""One `collector run`, start to end: launch or attach agents, check them, plan, measure,
persist, and always stop what was started. Nothing is written before every agent is up."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from google.protobuf.json_format import MessageToDict
from rich.console import Console

from fwbench.collector import __version__
from fwbench.collector.display import RichDisplay
from fwbench.collector.docker_launcher import remove_orphans, remove_run_containers, start_docker
from fwbench.collector.instances import base_name
from fwbench.collector.launch import AgentHandle, attach, parse_attached, start_local
from fwbench.collector.manifest import AgentManifest
from fwbench.collector.plan import Selection, SelectionError, plan_cells
from fwbench.collector.runner import AgentWork, RunContext, run_all
from fwbench.collector.schedule import cells_per_agent
from fwbench.collector.schema import SCHEMA_VERSION
from fwbench.collector.store import PersistenceError, ResultStore, RunFolder
from fwbench.collector.telemetry import DEFAULT_INTERVAL_SECONDS
from fwbench.spec import SPEC_VERSION, Catalogue


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
    launcher: str = "local"  # or "docker": how agents given by name are started
    cpuset: str = ""  # docker: CPUs each container is pinned to ("0-1"); "" = all


@dataclass
class RunSummary:
    run_id: str
    out_dir: Path
    statuses: dict[str, int]
    interrupted: bool


def new_run_id() -> str:
    return dt.datetime.now().strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(2)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


NVIDIA_DRIVER_MARKERS = ("/proc/driver/nvidia/version", "/dev/nvidiactl")


def nvidia_gpu_present() -> bool:
    """Whether this host has an NVIDIA driver loaded (what every CUDA agent needs)."""
    return any(Path(marker).exists() for marker in NVIDIA_DRIVER_MARKERS)


def resolve_agents(specs: Sequence[str], manifests: dict[str, AgentManifest]) -> None:
    """Raises SelectionError for an unknown agent, a malformed address, or a GPU agent on a
    host without an NVIDIA driver (before its multi-gigabyte environment is installed)."""
    if not specs:
        raise SelectionError(f"no agents given; declared agents: {', '.join(manifests)}")
    for instance in specs:
        spec = base_name(instance)  # A/A: NAME#2 is a second instance of NAME
        try:
            attached = parse_attached(spec)
        except ValueError as error:
            raise SelectionError(str(error)) from None
        if attached is None and spec not in manifests:
            raise SelectionError(
                f"unknown agent {spec!r}; declared agents: "
                f"{', '.join(manifests) or 'none'} (or use NAME@HOST:PORT)"
            )
        if attached is None and manifests[spec].requires_gpu and not nvidia_gpu_present():
            raise SelectionError(
                f"agent {spec} needs an NVIDIA GPU and driver; this host has none "
                f"(no {' or '.join(NVIDIA_DRIVER_MARKERS)}). CPU agents: "
                + ", ".join(n for n, m in manifests.items() if not m.requires_gpu)
            )


# Starts one agent: (manifest, instance name, FWBENCH_THREADS or 0) -> a healthy agent.
Starter = Callable[[AgentManifest, str, int], AgentHandle]


def starter(options: RunOptions, run_id: str, log_dir: Path, console: Console) -> Starter:
    """The launcher that options.launcher names, as a Starter."""
    timeout = options.start_timeout_seconds

    def start(manifest: AgentManifest, instance: str, threads: int) -> AgentHandle:
        if options.launcher == "docker":
            return start_docker(
                manifest,
                run_id,
                log_dir,
                report=console.print,
                timeout_seconds=timeout,
                threads=threads,
                cpuset=options.cpuset,
                instance=instance,
            )
        return start_local(
            manifest,
            log_dir,
            report=console.print,
            timeout_seconds=timeout,
            threads=threads,
            instance=instance,
        )

    return start


def launch_all(
    specs: Sequence[str],
    manifests: dict[str, AgentManifest],
    start: Starter,
    timeout: float,
) -> list[AgentHandle]:
    """Starts or attaches every agent side by side; on any failure stops those started and
    re-raises."""

    def one(spec: str) -> AgentHandle:
        attached = parse_attached(spec)
        if attached:
            return attach(*attached, timeout_seconds=min(timeout, 10.0))
        return start(manifests[base_name(spec)], spec, 0)

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


def _restarter(
    manifest: AgentManifest, start: Starter, instance: str
) -> Callable[[int], AgentHandle]:
    return lambda threads: start(manifest, instance, threads)


def host_metadata() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "collector_version": __version__,
        "spec_version": SPEC_VERSION,
    }


def execute_run(
    options: RunOptions,
    selection: Selection,
    catalogue: Catalogue,
    manifests: dict[str, AgentManifest],
    console: Console,
) -> RunSummary:
    """Runs it all; with the Docker launcher, no container of the run outlives it."""
    run_id = new_run_id()
    if options.launcher != "docker":
        return _execute(run_id, options, selection, catalogue, manifests, console)
    remove_orphans()
    try:
        return _execute(run_id, options, selection, catalogue, manifests, console)
    finally:
        remove_run_containers(run_id)  # what a Ctrl-C during start-up left half-started


def _execute(
    run_id: str,
    options: RunOptions,
    selection: Selection,
    catalogue: Catalogue,
    manifests: dict[str, AgentManifest],
    console: Console,
) -> RunSummary:
    out_dir = options.out_dir or Path("fwbench-results") / run_id
    if (out_dir / "run.json").exists():
        raise SelectionError(f"{out_dir} already holds a run; choose another --out")
    log_dir = Path(tempfile.mkdtemp(prefix="fwbench-logs-"))
    start = starter(options, run_id, log_dir, console)
    try:
        handles = launch_all(options.agents, manifests, start, options.start_timeout_seconds)
    except BaseException:
        shutil.rmtree(log_dir, ignore_errors=True)  # failures carry the log's last line
        raise
    work: list[AgentWork] = []
    try:
        for handle in handles:
            restart = None
            if handle.manifest is not None:
                restart = _restarter(handle.manifest, start, handle.name)
            describe = handle.client.describe()
            if not handle.metrics_address and describe.metrics_port:
                # Attached: the agent's own port, on the host the collector reaches it at.
                host = handle.address.rpartition(":")[0]
                handle.metrics_address = f"{host}:{describe.metrics_port}"
            work.append(AgentWork(handle, describe, [], restart))
        for item in work:
            item.cells = plan_cells(item.handle.name, item.describe, catalogue, selection)
        return _measure(run_id, out_dir, work, options, selection, catalogue, console)
    finally:
        for handle in [*handles, *(item.handle for item in work)]:
            handle.stop()  # idempotent; restarted instances are in `work`
        if out_dir.exists():
            _keep_logs(log_dir, out_dir)
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
        "started_at": _now(),
        "status": "running",
        "host": host_metadata(),
        "selection": json.loads(json.dumps(selection, default=lambda o: o.__dict__)),
        "agents": {item.handle.name: _agent_metadata(item) for item in work},
    }
    folder = RunFolder(out_dir)
    folder.create()
    store = ResultStore(options.store_path)
    store.start_run(run_id, out_dir.resolve(), metadata["started_at"], metadata)
    folder.write_metadata(metadata)
    recorder = _Recorder(run_id, store, folder)
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
    )
    interrupted = False
    try:
        with ctx.display:  # type: ignore[attr-defined]
            run_all(work, ctx)
    except KeyboardInterrupt:
        interrupted = True
    finally:
        failed = ctx.statuses.get("failed", 0) or ctx.statuses.get("cancelled", 0)
        metadata.update(
            finished_at=_now(),
            statuses=ctx.statuses,
            status="interrupted" if interrupted else ("failed" if failed else "ok"),
        )
        with contextlib.suppress(PersistenceError):  # the original error matters more
            store.finish_run(run_id, metadata["status"], metadata["finished_at"], metadata)
            # An interrupt can land between a row's commit and the folder's rewrite: sync.
            _write_tables(folder, store, run_id)
            folder.write_metadata(metadata)
        store.close()
    return RunSummary(run_id, out_dir, ctx.statuses, interrupted)


def _agent_metadata(item: AgentWork) -> dict[str, Any]:
    handle = item.handle
    return {
        "launcher": handle.launcher,
        "address": handle.address,
        "image": {"tag": handle.image, "id": handle.image_id, "digest": handle.image_digest}
        if handle.image
        else None,
        "manifest": str(handle.manifest.path) if handle.manifest else None,
        "environment_path": str(handle.env_path) if handle.env_path else None,
        "describe": MessageToDict(item.describe, preserving_proto_field_name=True),
    }


# The run folder's raw tables (samples, telemetry) are rewritten at most this often during a
# run, and at its end: rewriting them after every cell costs time that grows with the run.
RAW_TABLES_INTERVAL_SECONDS = 60.0


class _Recorder:
    """Commits each cell to the store (the durable record, `collector results RUN --export`),
    then refreshes the run folder: results after every cell, raw tables at most every
    RAW_TABLES_INTERVAL_SECONDS (and always at the end of the run, session._measure)."""

    def __init__(self, run_id: str, store: ResultStore, folder: RunFolder) -> None:
        self.run_id, self.store, self.folder = run_id, store, folder
        self.raw_written = time.monotonic()

    def record(
        self, row: dict[str, Any], samples_ns: Sequence[int], telemetry: pd.DataFrame | None
    ) -> None:
        self.store.add_result(self.run_id, row, samples_ns, telemetry)
        self.folder.write_results(self.store.results(self.run_id))
        if time.monotonic() - self.raw_written >= RAW_TABLES_INTERVAL_SECONDS:
            run_id = self.run_id
            self.folder.write_raw(self.store.samples(run_id), self.store.telemetry(run_id))
            self.raw_written = time.monotonic()


def _write_tables(folder: RunFolder, store: ResultStore, run_id: str) -> None:
    folder.write_tables(store.results(run_id), store.samples(run_id), store.telemetry(run_id))


def _keep_logs(log_dir: Path, out_dir: Path) -> None:
    target = out_dir / "logs"
    try:
        target.mkdir(exist_ok=True)
        for log in log_dir.glob("*.log"):
            shutil.copy2(log, target / log.name)
        shutil.rmtree(log_dir, ignore_errors=True)
    except OSError as error:
        print(f"warning: agent logs left in {log_dir}: {error}", file=sys.stderr)
