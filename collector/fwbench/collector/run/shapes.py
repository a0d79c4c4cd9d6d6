"""A selection's shape parameters: `--param NAME=V` or a sweep `NAME=A,B,...`, and the
combinations of its values each workload's cells take (plan.py)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from fwbench.spec import Catalogue

__all__ = ["SelectionError", "param_combinations", "parse_params"]


class SelectionError(ValueError):
    """Bad user input; the message is one line naming the problem and the valid choices."""


def parse_params(items: list[str]) -> dict[str, tuple[int, ...]]:
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SelectionError(f"invalid --param {item!r}: expected NAME=INTEGER[,INTEGER...]")
        try:
            values = tuple(dict.fromkeys(int(v) for v in value.split(",")))
        except ValueError:
            raise SelectionError(
                f"invalid --param {item!r}: values must be integers (NAME=A or NAME=A,B,...)"
            ) from None
        parsed[key.strip()] = values
    return parsed


def param_combinations(
    catalogue: Catalogue, workload: str, params: Mapping[str, tuple[int, ...]]
) -> list[dict[str, int]]:
    """Every combination of the swept values of `workload`'s own parameters, resolved
    (defaults filled in); raises CatalogueError for one out of its limits or rules."""
    own = catalogue.get(workload)
    names = [name for name in params if name in own.params]
    return [
        own.resolve_params(dict(zip(names, values, strict=True)))
        for values in itertools.product(*(params[name] for name in names))
    ]


def choices(kind: str, given: list[str], valid: tuple[str, ...]) -> tuple[str, ...]:
    """`given` (a comma-separated option's items), each one of `valid`, in order, once."""
    if not given:
        raise SelectionError(f"no {kind} given; valid: {', '.join(valid)}")
    for item in given:
        if item not in valid:
            raise SelectionError(f"unknown {kind[:-1]} {item!r}; valid: {', '.join(valid)}")
    return tuple(dict.fromkeys(given))


def integers(kind: str, given: list[str], minimum: int) -> tuple[int, ...]:
    """`given` as integers of at least `minimum`, in order, once."""
    values = []
    for item in given:
        try:
            value = int(item)
        except ValueError:
            raise SelectionError(f"invalid {kind} {item!r}: must be an integer") from None
        if value < minimum:
            raise SelectionError(f"invalid {kind} {value}: must be >= {minimum}")
        values.append(value)
    if not values:
        raise SelectionError(f"no {kind} given")
    return tuple(dict.fromkeys(values))
