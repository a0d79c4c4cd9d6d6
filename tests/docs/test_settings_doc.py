"""docs/settings.md lists every FWBENCH_* variable the spec package spells, each collector
setting with the description settings.py gives it; and the collector spells none itself
(#37: one place for every name)."""

from __future__ import annotations

import re
from pathlib import Path

from fwbench.spec import metadata, settings, startup

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "settings.md").read_text()


def _names(module: object) -> set[str]:
    return {
        value
        for key, value in vars(module).items()
        if key.isupper() and isinstance(value, str) and value.startswith("FWBENCH_")
    }


def test_every_collector_setting_is_documented_as_settings_py_describes_it() -> None:
    assert set(settings.SETTINGS) == _names(settings)
    for name, text in settings.SETTINGS.items():
        assert f"| `{name}` | {text} |" in DOC, name


def test_every_start_up_variable_and_the_token_are_named() -> None:
    for name in _names(startup) | _names(metadata):
        assert f"`{name}`" in DOC, name


def test_the_collector_spells_no_variable_name_itself() -> None:
    literal = re.compile(r"""["']FWBENCH_[A-Z0-9_]+["']""")
    found = [
        f"{path.relative_to(ROOT)}:{number}"
        for path in sorted((ROOT / "collector" / "fwbench").rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if literal.search(line)
    ]
    assert not found, found
