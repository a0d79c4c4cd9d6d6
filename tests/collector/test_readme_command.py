"""The README's first command is one a new user can run as written and one that can decide
something: its options parse as `collector run`'s, its agents are shipped, its selection is
valid, and it measures until decided within a stated budget (issue 36: a first run of one
process an agent decides nothing). Nothing is started: the real run takes minutes
(docs/report.md has what it measured)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from fwbench.collector.agents.manifest import discover_manifests
from fwbench.collector.agents.specs import Instance
from fwbench.collector.cli import app
from fwbench.collector.cli.decide import decide_options, parse_budget
from fwbench.collector.run.plan import build_selection, split_list
from fwbench.spec import load_catalogue

REPO = Path(__file__).resolve().parents[2]


def first_command() -> list[str]:
    """The README's first command, after `make setup && .venv/bin/collector`."""
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert block is not None
    first = block.group(1).splitlines()[0]
    setup, _, command = first.partition(" && ")
    assert setup == "make setup"
    words = shlex.split(command)
    assert words[:2] == [".venv/bin/collector", "run"], first
    return words[2:]


def test_the_first_command_parses_and_asks_something_it_can_decide() -> None:
    command = typer.main.get_command(app)
    run = command.commands["run"]  # type: ignore[attr-defined]
    options = run.make_context("run", first_command()).params
    assert options["until_decided"], "the first command measures until decided"
    assert 0 < parse_budget(options["budget"]) <= 10 * 60  # a stated budget, minutes
    agents = split_list(options["agents"])
    shipped = discover_manifests([REPO / "agents" / "manifests"])
    assert set(agents) <= set(shipped) and len(agents) >= 2
    assert not any(shipped[name].requires_gpu for name in agents)  # a fresh 2-core machine
    instances = [Instance(name) for name in agents]
    decide_options(True, options["budget"], options["baseline"], options["margin"], instances, True)
    selection = build_selection(
        load_catalogue(),
        workloads=options["workloads"],
        phases=options["phases"],
        batch_sizes=options["batch_sizes"],
    )
    cells = len(selection.workloads) * len(selection.phases) * len(selection.batch_sizes)
    # Few cells a round, so that rounds are many within the budget (each is one process of
    # every agent): the README says how many.
    assert cells * len(agents) <= 24
    assert f"measures {cells * len(agents)} cells" in (REPO / "README.md").read_text()
