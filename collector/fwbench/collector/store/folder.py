"""The run's output folder, an export of the store: results.parquet, results.csv,
samples.parquet, telemetry.parquet and run.json, each rewritten atomically (run/recording.py
says when)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from fwbench.collector.store.database import json_default, saving


def write_atomic(path: Path, data: bytes) -> None:
    """Replaces `path` whole or not at all; a failed write (a full disk) leaves the previous
    file as it was and no partial temporary file behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class RunFolder:
    """The run's output folder; every write raises PersistenceError with the real cause."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def create(self) -> None:
        with saving(str(self.path)):
            self.path.mkdir(parents=True, exist_ok=True)

    def write_metadata(self, metadata: Mapping[str, Any]) -> None:
        with saving(str(self.path)):
            write_atomic(
                self.path / "run.json",
                json.dumps(metadata, indent=2, default=json_default).encode(),
            )

    def write_tables(
        self,
        results: pd.DataFrame,
        samples: pd.DataFrame,
        telemetry: pd.DataFrame | None = None,
    ) -> None:
        self.write_results(results)
        self.write_raw(samples, telemetry)

    def write_results(self, results: pd.DataFrame) -> None:
        """results.parquet and results.csv: one row per cell."""
        with saving(str(self.path)):
            write_atomic(self.path / "results.parquet", results.to_parquet(index=False))
            write_atomic(self.path / "results.csv", results.to_csv(index=False).encode())

    def write_raw(self, samples: pd.DataFrame, telemetry: pd.DataFrame | None = None) -> None:
        """samples.parquet and telemetry.parquet: every step time and scraped value."""
        with saving(str(self.path)):
            write_atomic(self.path / "samples.parquet", samples.to_parquet(index=False))
            if telemetry is not None:
                write_atomic(self.path / "telemetry.parquet", telemetry.to_parquet(index=False))
