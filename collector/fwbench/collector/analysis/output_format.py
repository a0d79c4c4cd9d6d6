"""`collector compare --format`'s choices, in a module that imports nothing: analysis/formats.py,
which renders them, imports pandas, which `collector --help` must not (tests/collector/
test_startup_imports.py). formats.py re-exports it."""

from __future__ import annotations

from enum import StrEnum


class OutputFormat(StrEnum):
    TABLE = "table"
    MARKDOWN = "markdown"
    CSV = "csv"
    JSON = "json"
