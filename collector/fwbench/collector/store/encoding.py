"""How a row, its telemetry and a run's metadata are written as JSON (the store's texts, the run
folder's run.json and unsaved cells)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd


def json_default(value: object) -> object:
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if isinstance(value, np.integer | np.floating | np.bool_):
        return value.item()
    if value is pd.NA:  # pandas' missing value: stored as missing, like None
        return None
    raise TypeError(f"cannot store {type(value).__name__}")


def clean(row: Mapping[str, Any]) -> dict[str, Any]:
    """The row as stored: NaN as missing."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def telemetry_series(telemetry: pd.DataFrame | None) -> dict[str, list[Any]] | None:
    """A cell's raw telemetry as stored: {"time": [unix ns], "metric", "label", "value"}."""
    if telemetry is None or not len(telemetry):
        return None
    return {
        "time": telemetry["time"].astype("int64").tolist(),
        "metric": telemetry["metric"].astype(str).tolist(),
        "label": telemetry["label"].astype(str).tolist(),
        "value": telemetry["value"].astype(float).tolist(),
    }
