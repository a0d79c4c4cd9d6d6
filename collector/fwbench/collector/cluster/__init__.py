"""Placing agents on cluster schedulers the collector does not run itself (docs/cluster.md)."""
