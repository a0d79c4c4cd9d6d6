"""The pre-commit hooks run what `make lint` runs: the same tools, the same arguments."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_every_lint_step_is_a_hook_and_every_hook_a_lint_step() -> None:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    hooks = [hook for repo in config["repos"] for hook in repo["hooks"]]
    # The commit message's check is no lint step (tests/suite/test_commit_message.py).
    hooks = [hook for hook in hooks if hook.get("stages") != ["commit-msg"]]
    entries = {" ".join(h["entry"].replace(".venv/bin/", "").split()) for h in hooks}
    entries = {e.replace(" --force-exclude", "") for e in entries}
    makefile = (REPO / "Makefile").read_text()
    body = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    lines = [line.strip() for line in body.splitlines()[1:]]
    lines = [line for line in lines if not line.startswith("@$(CLOCK)")]  # the stage's record
    steps = {re.sub(r"^\$\(BIN\)/", "", line) for line in lines}
    # make lint checks the whole tree (`.`); a hook gets the files of the commit.
    steps = {step.removesuffix(" .") for step in steps}
    assert entries == steps
    assert all(h["language"] == "system" for h in hooks)
