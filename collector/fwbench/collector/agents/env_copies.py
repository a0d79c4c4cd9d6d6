"""An agent environment made as a copy of a twin: another agent's environment with the same
content (environments.content_key: the same installs, pip arguments, Python and agent
packages), where only the agent's switches differ. tf-eigen is tf-mkl with oneDNN off; the
tests' fake agents are one plugin under many names. Copying a ready twin takes seconds where
pip took minutes (the TensorFlow environment, 1.8 GB: 10 s against 103 s, Intel Xeon, 2
vCPUs, 2026-11-30), and gives what pip would have given: the same files, at their new path.

A virtual environment names its own folder in a few text files (pyvenv.cfg, the activate
scripts, the scripts' #! lines in bin/); those are rewritten. Compiled modules (.pyc) name
their source too, but the import system replaces that name with the file's real path when it
loads them. The copy is made beside its destination under another name and renamed into place,
so a copy cut short leaves the environment missing, never half there."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

MARKER = "fwbench-env.json"  # an environment ready: what it holds, and that it was checked
FAILED = "fwbench-env.failed"  # the one line of the last build's failure
_NOT_COPIED = ("install.log", MARKER, FAILED, "*.tmp")


def copy_twin(destination: Path, content: str, report: Callable[[str], None]) -> Path | None:
    """Copies into `destination` a ready environment beside it whose marker records the same
    `content`, and returns the twin's path; None (nothing done) where there is none. The
    caller holds destination's lock and checks and marks the copy as it would a build."""
    for twin in sorted(destination.parent.iterdir()):
        if twin == destination or not _holds(twin, content):
            continue
        partial = destination.with_name(f"{destination.name}.{os.getpid()}.copy")
        try:
            with FileLock(f"{twin}.lock"):  # not while the twin is being remade
                if not _holds(twin, content):
                    continue
                shutil.rmtree(partial, ignore_errors=True)
                ignored = shutil.ignore_patterns(*_NOT_COPIED)
                shutil.copytree(twin, partial, symlinks=True, ignore=ignored)
            _repoint(partial, str(twin), str(destination))
        except OSError:  # the twin went away, or the disk is full: a build's turn
            shutil.rmtree(partial, ignore_errors=True)
            continue
        report(f"making the {destination.name} environment as a copy of {twin.name}")
        shutil.rmtree(destination, ignore_errors=True)
        partial.rename(destination)
        return twin
    return None


def _holds(twin: Path, content: str) -> bool:
    """Whether `twin` is a ready environment (its last build did not fail) holding `content`."""
    if (twin / FAILED).exists():
        return False
    try:
        record = json.loads((twin / MARKER).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("content") == content


def _repoint(copy: Path, old: str, new: str) -> None:
    """The copy's own text files that name the twin's folder name the new one instead."""
    for path in [copy / "pyvenv.cfg", *(copy / "bin").iterdir()]:
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if old.encode() in data and b"\0" not in data[:1024]:
            path.write_bytes(data.replace(old.encode(), new.encode()))
