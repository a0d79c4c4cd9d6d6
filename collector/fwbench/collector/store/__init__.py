"""Where results live: the SQLite store (the durable record), the run folder exported from it,
and the results table's schema."""

from fwbench.collector.store.database import PersistenceError, ResultStore, default_store_path
from fwbench.collector.store.folder import RunFolder
from fwbench.collector.store.tables import StorageUnusable

__all__ = ["PersistenceError", "ResultStore", "RunFolder", "StorageUnusable", "default_store_path"]
