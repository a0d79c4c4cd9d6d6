"""The collector's temporary folders: the agents' logs while a command runs (`fwbench-logs-`),
the ports file an agent writes at start-up (`fwbench-ports-`), the empty working folder of a
Python the collector starts (`fwbench-cwd-`, pythons.py), the temporary folder of a uv command
that builds an environment (`fwbench-uv-`: uv leaves its build locks there, environments.py).
Every path of a command removes its own (session.py, launchers/local.py, cli/agents.py,
environments.py); their names carry the collector's process id, so that the next command
removes those of a collector that could not (SIGKILL, a power cut): folders of this user whose
process no longer runs.

Agents' logs are the exception: `collector run` moves them into the run folder (move_logs), at
its end and when an agent fails to start (and names them then); a later command on the same run
folder (`--resume`) never overwrites an earlier one's, its logs named NAME.resume-N.log. The logs
folder is marked with where its logs go (mark_logs): the folder of a collector that could not
move them (SIGKILL, a full disk) is moved there by the next command, never deleted, once that
run folder exists (docs/reliability.md). Commands without a run folder (`describe`,
`conformance`) keep theirs in fwbench-results/logs/COMMAND-STAMP/ (cli/common.py command_logs).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

KINDS = ("logs", "ports", "cwd", "uv")
DESTINATION = ".destination.json"  # in a logs folder: {"target": OUT/logs, "label": ...}
_NAME = re.compile(r"fwbench-(logs|ports|cwd|uv)-(\d+)-[^/]+")


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
        if match.group(1) == "logs" and not _logs_delivered(folder):
            continue  # its logs stay where they are until their run folder takes them
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def mark_logs(log_dir: Path, target: Path, label: str = "", make: bool = False) -> None:
    """Records where the logs of `log_dir` belong (`target`, a run folder's logs/) and the
    label of their names there ("resume-2": NAME.resume-2.log); with `make`, `target` is made
    for them (a command without a run folder: describe, conformance), else only moved into
    a run folder that exists."""
    record = {"target": str(target.absolute()), "label": label, "make": make}
    (log_dir / DESTINATION).write_text(json.dumps(record))


def _logs_delivered(folder: Path) -> bool:
    """Moves a gone collector's logs into their run folder; False when they must stay (that
    run folder exists but cannot take them now). Logs with no run folder (a collector killed
    while its first agents started) are not kept, as an interrupted start keeps nothing."""
    try:
        record = json.loads((folder / DESTINATION).read_text())
        target, label = Path(record["target"]), str(record.get("label", ""))
        make = record.get("make") is True
    except (OSError, ValueError, KeyError, TypeError):
        return True
    if not (make or target.parent.is_dir()) or not any(folder.glob("*.log")):
        return True
    try:
        move_logs(folder, target, label)
    except OSError:
        return False
    return True


def log_path(target: Path, name: str, label: str = "") -> Path:
    """Where the log `name` (NAME.log) goes in `target`: NAME.LABEL.log with a label, and a
    number added to a name already there, so no earlier command's log is overwritten."""
    stem = Path(name).stem + (f".{label}" if label else "")
    path, number = target / f"{stem}.log", 1
    while path.exists():
        number += 1
        path = target / f"{stem}.{number}.log"
    return path


def move_logs(log_dir: Path, target: Path, label: str = "") -> list[Path]:
    """Moves the `*.log` files of `log_dir` into `target` (made when there are any; names by
    log_path) and removes `log_dir`; returns the moved files' new paths. A move that fails
    (OSError) leaves no partial copy, and `log_dir` with what was not moved."""
    logs = sorted(log_dir.glob("*.log"))
    moved = []
    if logs:
        target.mkdir(parents=True, exist_ok=True)
        for log in logs:
            path = log_path(target, log.name, label)
            try:
                os.rename(log, path)
            except OSError:  # another file system: copied, then removed
                try:
                    shutil.copy2(log, path)
                except BaseException:
                    with contextlib.suppress(OSError):
                        path.unlink(missing_ok=True)
                    raise
                log.unlink()
            moved.append(path)
    shutil.rmtree(log_dir, ignore_errors=True)
    return moved
