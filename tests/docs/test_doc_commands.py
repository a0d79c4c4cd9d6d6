"""The commands the README's quick start and docs/usage.md's command list show are commands
the collector takes: each parses as written (its subcommand exists, every option is one of
that command's, every value has the option's type), and the agents it names are shipped.
Nothing is run here: what these commands do is tested where their features are."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer

from fwbench.collector.agents.manifest import discover_manifests
from fwbench.collector.cli import app
from fwbench.collector.run.plan import split_list

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "20261128-120000-abcd"  # what the placeholders stand for


def blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", page.read_text("utf-8"), re.M | re.S)


def commands(block: str) -> list[str]:
    """The block's `collector` lines: continuations joined, comments dropped; a line that
    elides (...) or shows optional parts ([--force]) is not a whole command."""
    joined = re.sub(r"\\\n\s*", " ", block)
    found = []
    for line in joined.splitlines():
        line = line.split("  #")[0].split(" > ")[0].strip()  # a comment, a redirection
        if not line.startswith("collector ") or "..." in line or "[" in line or ";" in line:
            continue
        found.append(line.replace("RUN_ID", RUN_ID).replace("RUN_A", RUN_ID))
    return found


QUICK_START = commands(blocks(REPO / "README.md", "text")[0])
USAGE = commands(blocks(REPO / "docs" / "usage.md", "bash")[0])


def parse(line: str) -> tuple[str, dict[str, object]]:
    """The subcommand's name and its parsed parameters; a click error fails the test."""
    words = shlex.split(line)[1:]
    group: Any = typer.main.get_command(app)  # Typer's own click: groups have .commands
    path = []
    while hasattr(group, "commands") and words and words[0] in group.commands:
        path.append(words[0])
        group = group.commands[words.pop(0)]
    assert path and not hasattr(group, "commands"), f"no such command: {line}"
    context = group.make_context(" ".join(path), words)
    return " ".join(path), dict(context.params)


def test_the_lists_are_there() -> None:
    assert len(QUICK_START) >= 4 and len(USAGE) >= 25, (QUICK_START, USAGE)


@pytest.mark.parametrize("line", QUICK_START + USAGE)
def test_a_shown_command_parses_and_names_shipped_agents(line: str) -> None:
    name, params = parse(line)
    shipped = discover_manifests([REPO / "agents" / "manifests"])
    for option in ("agents", "aa"):
        for agent in split_list(str(params.get(option) or "")):
            base = agent.split("@")[0]
            assert base in shipped or ":" in base or "/" in base, f"{agent}: not shipped"
    target = params.get("agent") or (params.get("target") if name == "conformance" else None)
    if target:
        target = str(target)
        assert target.split("@")[0] in shipped or re.match(r"[\w.]+:\d+$", target), target
