"""The collector as a user runs it, in a folder and with a store of the test's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd


def collector(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    store = ["--store", str(tmp_path / "store.sqlite")]
    return subprocess.run(
        [sys.executable, "-m", "fwbench.collector.cli", *args, *store],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )


def folder_rows(folder: Path) -> pd.DataFrame:
    """The rows a run folder holds so far (empty before the first, or while it is replaced)."""
    try:
        return pd.read_parquet(folder / "results.parquet")
    except (FileNotFoundError, OSError, ValueError):  # not written yet, or mid-replace
        return pd.DataFrame()
