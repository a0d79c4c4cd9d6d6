"""How the collector starts a Python: never from the caller's folder. A module there named like
one a Python imports (torch.py, pip.py, venv.py, a fwbench/ package) must never run: `python
-m pip` and `python -c` put the working folder first on sys.path, and an empty or relative
PYTHONPATH entry (a stray ':' at either end) resolves against it too. So every Python the
collector starts gets a flag that prepends nothing, and runs in a folder of its own.

- `isolated`: `-I`, for the environments the collector made (venv creation, pip, the check
  that an environment imports its agent): no PYTHON* variable and no user site either, so
  what is installed there is exactly what pip put there.
- `safe_path`: `-P`, for the collector's own interpreter (pip for an overlay or a wheelhouse,
  pip-tools, the calibration's NumPy) and interpreters a user names (--python, calibration):
  PYTHONPATH and the user site honoured, as the collector's own imports and its agents' are
  (a `pip install --target` folder on PYTHONPATH is how packages reach a host without an
  index). The agents themselves are started with -P too (launchers/local.py, slurm_scripts.py).
- `run_python`: subprocess.run in `cwd` (an environment's own folder) or else in a new empty
  temporary folder (a scratch folder, removed afterwards)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from fwbench.collector.agents.scratch import scratch_folder


def isolated(python: str | Path, *arguments: str) -> list[str]:
    return [str(python), "-I", *arguments]


def safe_path(python: str | Path, *arguments: str) -> list[str]:
    return [str(python), "-P", *arguments]


def run_python(
    command: list[str], cwd: Path | None = None, **options: Any
) -> subprocess.CompletedProcess[Any]:
    """subprocess.run(command, **options) in `cwd`, or in an empty folder made for it."""
    if cwd is not None:
        return subprocess.run(command, cwd=cwd, **options)
    folder = scratch_folder("cwd")
    try:
        return subprocess.run(command, cwd=folder, **options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
