"""Prometheus service discovery for the agents of a run (docs/telemetry.md): with
FWBENCH_PROMETHEUS_TARGETS=DIR, the run keeps DIR/fwbench-RUN_ID.json, a file_sd list of every
agent's and every rank's /metrics where the collector reaches it (a Slurm node's address
included), labelled agent, run, launcher, and node and rank where there are such. It is written
once the agents are up, rewritten whenever one is replaced by a fresh process, and removed
when the run ends. Beside it, DIR/.fwbench-RUN_ID.owner names the collector (host, pid, start
time: store/owner.py); a run starting on the same host removes the files of runs whose
collector is gone (killed outright, it could not remove them), so Prometheus stops scraping
agents that no longer exist. A Prometheus whose file_sd_configs read DIR/*.json (the compose fleet's
reads targets/*.json: compose/prometheus/prometheus.yml) then scrapes the agents wherever a
scheduler placed them, for as long as they live."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.plan import SelectionError
from fwbench.collector.store.owner import collector_gone, this_collector
from fwbench.spec import settings

VARIABLE = settings.PROMETHEUS_TARGETS


class TargetsError(SelectionError):
    """The targets folder cannot be used (bad input: the run does not start)."""


def target_groups(handles: list[AgentHandle], run_id: str) -> list[dict[str, Any]]:
    """file_sd groups: one per agent, or per rank of a world, that serves /metrics."""
    groups = []
    for handle in handles:
        ranks: list[AgentHandle] = getattr(handle, "ranks", None) or [handle]
        for index, one in enumerate(ranks):
            if not one.metrics_address:
                continue
            labels = {"agent": handle.name, "run": run_id, "launcher": handle.kind}
            if node := one.identity().get("node"):
                labels["node"] = str(node)
            if len(ranks) > 1 or getattr(handle, "ranks", None):
                labels["rank"] = str(index)
            groups.append({"targets": [one.metrics_address], "labels": labels})
    return groups


class TargetsFile:
    """The run's targets file, kept up to date with its agents."""

    def __init__(
        self, folder: Path, run_id: str, report: Callable[[str], None] = lambda _: None
    ) -> None:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise TargetsError(f"{VARIABLE}={folder}: {error.strerror}") from None
        if not os.access(folder, os.W_OK):
            raise TargetsError(f"{VARIABLE}={folder}: not writable")
        self.path = folder / f"fwbench-{run_id}.json"
        self.owner = folder / f".fwbench-{run_id}.owner"
        self.run_id = run_id
        self._handles: dict[str, AgentHandle] = {}
        for gone in remove_orphans(folder):
            report(f"{VARIABLE}: removed the targets of run {gone}, whose collector is gone")
        try:
            self.owner.write_text(json.dumps(this_collector()) + "\n")
        except OSError as error:
            raise TargetsError(f"{VARIABLE}={folder}: {error.strerror}") from None

    @classmethod
    def from_environment(
        cls,
        run_id: str,
        environ: Mapping[str, str] = os.environ,
        report: Callable[[str], None] = lambda _: None,
    ) -> TargetsFile | None:
        folder = environ.get(VARIABLE, "").strip()
        return cls(Path(folder), run_id, report) if folder else None

    def put(self, *handles: AgentHandle) -> None:
        """Adds or replaces these agents (by name) and rewrites the file atomically."""
        self._handles.update((handle.name, handle) for handle in handles)
        text = json.dumps(target_groups(list(self._handles.values()), self.run_id), indent=1)
        partial = self.path.with_name(self.path.name + ".tmp")  # not *.json: never half read
        partial.write_text(text + "\n")
        os.replace(partial, self.path)

    def follow(
        self, restart: Callable[[int], AgentHandle] | None
    ) -> Callable[[int], AgentHandle] | None:
        """`restart`, publishing each fresh instance it starts."""
        if restart is None:
            return None

        def restarted(threads: int) -> AgentHandle:
            handle = restart(threads)
            self.put(handle)
            return handle

        return restarted

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)
        self.owner.unlink(missing_ok=True)


def remove_orphans(folder: Path) -> list[str]:
    """Removes the targets files of runs whose collector is gone (this host's only: another
    host's collector cannot be checked from here); returns their run ids. A file without an
    owner beside it (written by an older collector) is left alone."""
    removed = []
    for owner in sorted(folder.glob(".fwbench-*.owner")):
        run_id = owner.name.removeprefix(".fwbench-").removesuffix(".owner")
        try:
            record = json.loads(owner.read_text())
        except (OSError, ValueError):
            continue  # being written, or not ours to judge
        if not isinstance(record, dict) or not collector_gone(record):
            continue
        (folder / f"fwbench-{run_id}.json").unlink(missing_ok=True)
        owner.unlink(missing_ok=True)
        removed.append(run_id)
    return removed
