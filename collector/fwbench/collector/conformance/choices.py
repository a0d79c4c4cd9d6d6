"""The choices `collector conformance`'s options offer (--checks, --cells), in a module that
imports nothing: the suite's modules (conformance/plan.py, conformance/cells.py) import gRPC
and the protocol, which `collector --help` must not (tests/collector/test_startup_imports.py).
Each of those re-exports its own."""

from __future__ import annotations

from enum import StrEnum

# The check groups, in the suite's order (conformance/plan.py).
GROUPS = (
    "describe",
    "services",
    "errors",
    "cells",
    "threads",
    "heartbeat",
    "lifecycle",
    "metrics",
)


class CellSet(StrEnum):
    """--cells: which cells the suite runs (conformance/cells.py says what each holds)."""

    ALL = "all"
    EACH = "each"
    ONE = "one"
