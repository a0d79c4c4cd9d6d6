"""Where results live: the SQLite store (the durable record), the run folder exported from it,
and the results table's schema.

The names below are loaded on first use (PEP 562): the store's modules import pandas, which a
module that needs only a light one (cell_key: what identifies a cell, for a run's plan) should
not pay for, nor should a command refused before it measures."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fwbench.collector.store.database import PersistenceError, ResultStore, default_store_path
    from fwbench.collector.store.folder import RunFolder
    from fwbench.collector.store.tables import StorageUnusable

_HOMES = {
    "PersistenceError": "database",
    "ResultStore": "database",
    "default_store_path": "database",
    "RunFolder": "folder",
    "StorageUnusable": "tables",
}


def __getattr__(name: str) -> object:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


__all__ = ["PersistenceError", "ResultStore", "RunFolder", "StorageUnusable", "default_store_path"]
