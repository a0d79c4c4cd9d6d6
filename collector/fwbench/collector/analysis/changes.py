"""What differs between two runs of an agent besides the time: its framework's version, its
libraries, the environment its processes reported (`--agent-env`, allocator and thread
variables), its image, the host's CPU. `collector compare RUN_A RUN_B` prints these next to the
speedups, so a regression or a gain is read with its likely cause, and two runs meant to
differ in one setting are seen to differ in that one only."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from fwbench.collector.analysis.contenders import RunData

# Columns of one value per agent (per process, for `environment`), in the order printed.
PLAIN = ("framework_version", "variant", "plugin_version", "image_id", "launcher", "cpu_model")
KEYED = ("libraries", "environment")  # JSON objects: compared key by key


def _values(rows: pd.DataFrame, column: str) -> set[str]:
    if column not in rows:
        return set()
    return {str(v) for v in rows[column].dropna() if str(v) != ""}


def _keyed(rows: pd.DataFrame, column: str) -> dict[str, set[str]]:
    """Each key of the JSON objects in `column`, with every value it took among the rows (a
    key missing from a row counts as "(unset)")."""
    objects: list[dict[str, Any]] = []
    for text in rows[column].dropna() if column in rows else []:
        try:
            value = json.loads(text)
        except (TypeError, json.JSONDecodeError):
            continue
        if isinstance(value, dict):
            objects.append(value)
    keys = {key for item in objects for key in item}
    return {k: {str(item.get(k, "(unset)")) for item in objects} for k in keys}


def _shown(values: set[str]) -> str:
    return " | ".join(sorted(values)) if values else "(unset)"


def agent_changes(before: pd.DataFrame, after: pd.DataFrame) -> list[str]:
    """What differs between one agent's rows in two runs, a phrase each."""
    found = []
    for column in PLAIN:
        old, new = _values(before, column), _values(after, column)
        if old and new and old != new:
            found.append(f"{column} {_shown(old)} -> {_shown(new)}")
    for column in KEYED:
        keyed_old, keyed_new = _keyed(before, column), _keyed(after, column)
        for key in sorted(set(keyed_old) | set(keyed_new)):
            was, now = keyed_old.get(key, {"(unset)"}), keyed_new.get(key, {"(unset)"})
            if was != now:
                found.append(f"{key} {_shown(was)} -> {_shown(now)}")
    return found


def run_changes(before: RunData, after: RunData) -> list[str]:
    """For every agent in both runs whose rows differ in more than their times, one line:
    `AGENT: what -> what; ...`."""
    lines: list[str] = []
    old, new = before.results, after.results
    if "agent" not in old or "agent" not in new:
        return lines
    for agent in dict.fromkeys(new["agent"].dropna()):
        if agent not in set(old["agent"]):
            continue
        found = agent_changes(old[old["agent"] == agent], new[new["agent"] == agent])
        if found:
            lines.append(f"{agent}: " + "; ".join(found))
    return lines
