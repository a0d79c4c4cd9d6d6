"""Runs the real `collector` console script the way a user does (shared by the integration
tests)."""

from __future__ import annotations

import os
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
