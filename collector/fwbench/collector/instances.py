"""Agent instances: one declared agent may run as several processes in one run, for an A/A
comparison (the same agent twice, to measure the machine's noise floor). The first instance
keeps the agent's name; the next are NAME#2, NAME#3, ... in the results table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

SEPARATOR = "#"


def base_name(instance: str) -> str:
    """The declared agent an instance runs: `tf-eigen#2` -> `tf-eigen`."""
    return instance.partition(SEPARATOR)[0]


def expand_instances(specs: Sequence[str], aa: Sequence[str] = ()) -> tuple[str, ...]:
    """Agent specs as given, a repeated plain name becoming NAME#2, NAME#3; each name in `aa`
    adds a second instance of that agent (and the first, when it was not listed). An
    attached agent (NAME@HOST:PORT) given twice is the same agent and is kept once."""
    wanted = list(specs)
    for name in aa:
        wanted += [name, name] if name not in wanted else [name]
    seen: Counter[str] = Counter()
    instances: list[str] = []
    for spec in wanted:
        if "@" in spec:
            if spec not in instances:
                instances.append(spec)
            continue
        seen[spec] += 1
        instances.append(spec if seen[spec] == 1 else f"{spec}{SEPARATOR}{seen[spec]}")
    return tuple(instances)


def aa_pairs(agents: Iterable[str]) -> list[tuple[str, str]]:
    """(first instance, other instance) for every agent that ran more than once."""
    by_base: dict[str, list[str]] = {}
    for agent in dict.fromkeys(agents):
        by_base.setdefault(base_name(agent), []).append(agent)
    pairs = []
    for base, group in by_base.items():
        group.sort(key=lambda agent: (agent != base, agent))
        pairs += [(group[0], other) for other in group[1:]]
    return pairs
