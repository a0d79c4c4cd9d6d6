"""Runs the real `collector` console script the way a user does (shared by the integration
tests)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

COLLECTOR = str(Path(sys.executable).parent / "collector")


def collector(*args: str, cwd: Path, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COLLECTOR, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def sigint_default() -> None:
    """preexec_fn for a collector the test interrupts: a shell that starts the test run in the
    background (`make test &`, nohup) hands its children SIGINT ignored, and Python then never
    raises KeyboardInterrupt; a user's terminal gives the default, as this does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
