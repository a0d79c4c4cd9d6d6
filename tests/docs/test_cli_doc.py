"""docs/cli.md, the reference of every command and option, is generated from the CLI itself
(Typer's `utils docs`, its HTML escapes undone) and must not drift from it."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REGENERATE = "make docs"


def test_the_cli_reference_is_current(tmp_path: Path) -> None:
    typer = Path(sys.executable).with_name("typer")
    out = tmp_path / "cli.md"
    done = subprocess.run(
        [
            str(typer),
            "fwbench.collector.cli",
            "utils",
            "docs",
            "--name",
            "collector",
            "--output",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Typer escapes quotes as HTML (&#x27;); the page shows them as they are (make docs).
    generated = html.unescape(out.read_text("utf-8"))
    assert generated == (REPO / "docs" / "cli.md").read_text("utf-8"), (
        f"docs/cli.md is out of date with the CLI; run `{REGENERATE}`"
    )
