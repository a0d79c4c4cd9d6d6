"""docs/results-schema.md is generated from the schema and must not drift from it."""

from __future__ import annotations

from pathlib import Path

from fwbench.collector.store.schema import COLUMN_NAMES, SCHEMA_VERSION, schema_markdown

SCHEMA_DOC = Path(__file__).resolve().parents[2] / "docs" / "results-schema.md"
REGENERATE = "collector schema > docs/results-schema.md"


def test_schema_docs_match_schema_markdown() -> None:
    assert SCHEMA_DOC.is_file(), f"{SCHEMA_DOC} is missing; create it with `{REGENERATE}`"
    assert SCHEMA_DOC.read_text("utf-8") == schema_markdown(), (
        f"docs/results-schema.md is out of date with fwbench.collector.store.schema; "
        f"regenerate it with `{REGENERATE}` (from the repository root)"
    )


def test_schema_markdown_lists_every_column_in_order() -> None:
    text = schema_markdown()
    assert text.startswith(f"# Results table schema, version {SCHEMA_VERSION}\n")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == list(COLUMN_NAMES)
