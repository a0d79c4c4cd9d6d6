"""The collector's temporary folders: the agents' logs while a command runs (`fwbench-logs-`),
the ports file an agent writes at start-up (`fwbench-ports-`), the empty working folder of a
Python the collector starts (`fwbench-cwd-`, pythons.py). Every path of a command removes
its own (session.py, launchers/local.py, cli/agents.py); their names carry the collector's
process id, so that the next command removes those of a collector that could not (SIGKILL, a
power cut): folders of this user whose process no longer runs.

An agent that fails to start is the one case whose log outlives the temporary folder: `collector
run` moves it into the run folder (move_logs) and names it (docs/reliability.md)."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

KINDS = ("logs", "ports", "cwd")
_NAME = re.compile(r"fwbench-(logs|ports|cwd)-(\d+)-[^/]+")


def scratch_folder(kind: str) -> Path:
    """A new temporary folder of `kind` (KINDS) of this process; removes stale ones first."""
    assert kind in KINDS, kind
    remove_stale()
    return Path(tempfile.mkdtemp(prefix=f"fwbench-{kind}-{os.getpid()}-"))


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: running
        return True
    return True


def remove_stale(root: Path | None = None) -> list[Path]:
    """Removes this user's scratch folders whose collector process is gone; returns them."""
    removed = []
    for folder in (root or Path(tempfile.gettempdir())).glob("fwbench-*-*-*"):
        match = _NAME.fullmatch(folder.name)
        if match is None or not folder.is_dir() or _running(int(match.group(2))):
            continue
        try:
            if folder.stat().st_uid != os.getuid():
                continue
        except OSError:
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def move_logs(log_dir: Path, target: Path) -> list[Path]:
    """Moves the `*.log` files of `log_dir` into `target` (made when there are any) and
    removes `log_dir`; returns the moved files' new paths."""
    logs = sorted(log_dir.glob("*.log"))
    moved = []
    if logs:
        target.mkdir(parents=True, exist_ok=True)
        for log in logs:
            moved.append(Path(shutil.move(log, target / log.name)))
    shutil.rmtree(log_dir, ignore_errors=True)
    return moved
