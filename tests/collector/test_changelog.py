"""The changelog keeps the results schema's history: every version up to the current one has
its row, and none beyond it."""

from __future__ import annotations

import re
from pathlib import Path

from fwbench.collector.store.schema import SCHEMA_VERSION

REPO = Path(__file__).resolve().parents[2]


def test_every_schema_version_has_its_row() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    section = text.split("## Results schema", 1)[1]
    versions = [int(v) for v in re.findall(r"^\| (\d+) \|", section, flags=re.MULTILINE)]
    assert sorted(versions) == list(range(1, SCHEMA_VERSION + 1))
