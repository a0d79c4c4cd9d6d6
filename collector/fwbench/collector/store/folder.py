"""The run's output folder, an export of the store: results.parquet, results.csv,
samples.parquet, telemetry.parquet and run.json, each rewritten atomically (run/recording.py
says when); and, when the store cannot save a measured cell (its disk full), that cell in
unsaved/cell-N.json.

While the run goes on the folder holds RESERVE_BYTES of its disk set aside (`.reserve`), given
back at the run's end (release()): a disk that fills during the run still has room then for
run.json's last state and the unsaved cell, so run.json never stays `running` for want of a
few kilobytes. A collector killed outright leaves `.reserve` behind; `--resume` takes it over
and gives it back, and stores the unsaved cells (run/resume.py store_unsaved), moving each to
unsaved/stored/."""

from __future__ import annotations

import contextlib
import errno
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from fwbench.collector.store.database import PersistenceError, saving
from fwbench.collector.store.encoding import clean, json_default, telemetry_series

RESERVE = ".reserve"
RESERVE_BYTES = 4 * 2**20


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
        """Makes the folder and sets its reserve aside."""
        with saving(str(self.path)):
            self.path.mkdir(parents=True, exist_ok=True)
            reserve = self.path / RESERVE
            try:
                with reserve.open("wb") as sink:
                    try:
                        os.posix_fallocate(sink.fileno(), 0, RESERVE_BYTES)
                    except OSError as error:  # a file system that cannot: written out
                        if error.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                            raise
                        sink.write(bytes(RESERVE_BYTES))
            except BaseException:
                reserve.unlink(missing_ok=True)
                raise

    def release(self) -> None:
        """Gives the reserve back (the run is ending)."""
        with contextlib.suppress(OSError):
            (self.path / RESERVE).unlink(missing_ok=True)

    def write_unsaved(
        self,
        row: Mapping[str, Any],
        samples_ns: Sequence[int],
        telemetry: pd.DataFrame | None,
        why: str,
    ) -> Path:
        """A measured cell the store could not save, whole (its row, every sample, its raw
        telemetry and why), as unsaved/cell-N.json; returns the path."""
        target = self.path / "unsaved" / f"cell-{row['cell']}.json"
        record = {
            "why": why,
            "row": clean(row),
            "sample_nanoseconds": [int(ns) for ns in samples_ns],
            "telemetry": telemetry_series(telemetry),
        }
        with saving(str(target)):
            target.parent.mkdir(exist_ok=True)
            write_atomic(target, json.dumps(record, default=json_default).encode())
        return target

    def unsaved(self) -> list[tuple[Path, dict[str, Any]]]:
        """The unsaved cells written by write_unsaved (a resume stores them), each with its
        file; a file that is not one whole unsaved cell raises PersistenceError naming it."""
        found = []
        for path in sorted((self.path / "unsaved").glob("cell-*.json")):
            try:
                record = json.loads(path.read_text())
                row, samples = record["row"], record["sample_nanoseconds"]
                series = record["telemetry"]
                valid = (
                    isinstance(row, dict)
                    and isinstance(row.get("cell"), int)
                    and all(isinstance(ns, int) for ns in samples)
                    and (series is None or set(series) == {"time", "metric", "label", "value"})
                )
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise PersistenceError(f"cannot read the unsaved cell {path}: {error}") from error
            if not valid:
                raise PersistenceError(f"{path} is not an unsaved cell of fwbench")
            found.append((path, record))
        return found

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
