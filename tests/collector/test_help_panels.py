"""`collector run --help` in sections (cli/panels.py): every option in exactly one panel, the
panels in their order, an unplaced option refused at import, and the option aliases other
commands share left as they were."""

from __future__ import annotations

import re
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

from fwbench.collector.cli import app
from fwbench.collector.cli.panels import RUN_PANELS, UnplacedOption, in_panels
from fwbench.collector.cli.telemetry import ScrapeInterval


def _help(*command: str) -> str:
    done = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    return done.output


# Options whose flag is not their parameter's name.
SPELLED = {"model_input": "--input", "sample": "--inputs"}


def test_run_help_reads_in_the_panels_order_with_every_option_once() -> None:
    shown = _help("run")
    titles = re.findall(r"╭─ (.+?) ─", shown)
    assert titles == ["Options", *RUN_PANELS]  # --help itself, then the sections in order
    for panel, names in RUN_PANELS.items():
        body = shown.split(f"╭─ {panel} ─", 1)[1].split("╰", 1)[0]
        for name in names:
            flag = SPELLED.get(name) or "--" + name.replace("_", "-")
            assert re.search(rf"{flag}\b", body), (panel, flag)
    # --fresh-process/--same-process and --aa keep their own spellings.
    assert "--same-process" in shown and "--aa " in shown


def test_an_option_in_no_panel_is_refused_at_import() -> None:
    def command(
        placed: Annotated[int, typer.Option()] = 0, forgotten: Annotated[int, typer.Option()] = 0
    ) -> None:
        """A command with an option nobody placed."""

    with pytest.raises(UnplacedOption, match=r"in no panel \['forgotten'\]"):
        in_panels({"Placed": ("placed",)})(command)
    with pytest.raises(UnplacedOption, match=r"unknown \['gone'\]"):
        in_panels({"Placed": ("placed", "forgotten", "gone")})(command)


def test_shared_option_aliases_keep_no_panel() -> None:
    """ScrapeInterval is `run`'s and other commands' too: run's panel is set on a copy."""
    (info,) = [x for x in ScrapeInterval.__metadata__ if isinstance(x, typer.models.OptionInfo)]
    assert info.rich_help_panel is None
